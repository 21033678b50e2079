/**
 * The inbox's signal coalescer on a clock the test moves itself: every wait is an event (a sleep the
 * coalescer asks for, a send it makes), never a real delay.
 */
import { SignalCoalescer, type CoalescerClock } from '../../src/inbox/app';

/** A clock that moves only when told; sleeps end when it passes their end. */
function testClock() {
  let now = 0;
  const sleepers: Array<{ until: number; wake: () => void }> = [];
  const asked: number[] = [];
  let onSleep: (() => void) | undefined;
  const clock: CoalescerClock & {
    advance(ms: number): void;
    /** Resolves once the coalescer has asked to sleep (again); answers how long. */
    nextSleep(): Promise<number>;
    sleeping(): number;
  } = {
    now: () => now,
    sleep(ms) {
      asked.push(ms);
      onSleep?.();
      return new Promise<void>((wake) => sleepers.push({ until: now + ms, wake }));
    },
    advance(ms) {
      now += ms;
      for (const s of sleepers.filter((x) => x.until <= now)) {
        sleepers.splice(sleepers.indexOf(s), 1);
        s.wake();
      }
    },
    nextSleep() {
      const seen = asked.length;
      return new Promise<number>((resolve) => {
        const check = () => {
          if (asked.length > seen) {
            onSleep = undefined;
            resolve(asked[seen]!);
          }
        };
        onSleep = check;
      });
    },
    sleeping: () => sleepers.length,
  };
  return clock;
}

interface Send {
  id: string;
  at: number;
  ok(): void;
  fail(): void;
}

/** Every send the coalescer makes, in order, each settled by the test; `next()` waits for the next one. */
function sends(clock: CoalescerClock) {
  const made: Send[] = [];
  const waiting: Array<(s: Send) => void> = [];
  let taken = 0;
  const send = (t: { id: string }) =>
    new Promise<void>((ok, fail) => {
      const s = { id: t.id, at: clock.now(), ok: () => ok(), fail: () => fail(new Error('unavailable')) };
      made.push(s);
      waiting.shift()?.(s);
    });
  return {
    send,
    made,
    next(): Promise<Send> {
      const s = made[taken];
      taken += 1;
      return s ? Promise.resolve(s) : new Promise((r) => waiting.push(r));
    },
  };
}

/** Lets every promise continuation that is ready run (no time passes on the test clock). */
const settle = () => new Promise((r) => setImmediate(r));

describe('SignalCoalescer', () => {
  it('signals at once, folds a burst into one trailing signal spaced by the interval, then is quiet', async () => {
    const clock = testClock();
    const s = sends(clock);
    const c = new SignalCoalescer<{ id: string }>(s.send, 200, 10_000, clock);
    c.signal({ id: 'a' });
    expect(s.made).toHaveLength(1); // the first one goes out at once
    const first = await s.next();
    for (let i = 0; i < 50; i++) c.signal({ id: 'a' }); // a burst while it is in flight
    expect(s.made).toHaveLength(1);
    clock.advance(30); // the first send took 30 ms
    const asked = clock.nextSleep();
    first.ok();
    expect(await asked).toBe(170); // the trailing signal waits out the rest of the interval
    clock.advance(169);
    await settle();
    expect(s.made).toHaveLength(1);
    clock.advance(1);
    const second = await s.next();
    expect(second.at - first.at).toBe(200);
    second.ok();
    await settle();
    expect(c.inFlight()).toBe(0); // nothing new came: no third signal
    expect(s.made).toHaveLength(2);
    expect(clock.sleeping()).toBe(0);
  });

  it('keeps registrations apart, and a failed send still sends the newer callbacks’ signal', async () => {
    const clock = testClock();
    const s = sends(clock);
    const c = new SignalCoalescer<{ id: string }>(s.send, 30, 10_000, clock);
    c.signal({ id: 'a' });
    c.signal({ id: 'b' });
    c.signal({ id: 'a' });
    expect(s.made.map((x) => x.id)).toEqual(['a', 'b']);
    const [a1, b1] = [await s.next(), await s.next()];
    const asked = clock.nextSleep();
    a1.fail();
    b1.ok();
    expect(await asked).toBe(30);
    clock.advance(30);
    const a2 = await s.next();
    expect(a2.id).toBe('a');
    a2.ok();
    await settle();
    expect(s.made.map((x) => x.id)).toEqual(['a', 'b', 'a']);
    expect(c.inFlight()).toBe(0);
  });

  it('remind signals a registration only when this process has not signalled it within the refresh time, or its last signal failed', async () => {
    const clock = testClock();
    const s = sends(clock);
    const c = new SignalCoalescer<{ id: string }>(s.send, 10, 150, clock);
    c.remind({ id: 'a' }); // never signalled here: goes out
    (await s.next()).ok();
    await settle();
    for (let i = 0; i < 20; i++) c.remind({ id: 'a' }); // signalled just now: the workflow drains these
    clock.advance(149);
    c.remind({ id: 'a' });
    expect(s.made.map((x) => x.id)).toEqual(['a']);
    clock.advance(1); // the refresh time has passed: one more, in case the last one was lost
    c.remind({ id: 'a' });
    expect(s.made.map((x) => x.id)).toEqual(['a', 'a']);
    (await s.next()).ok();
    c.signal({ id: 'b' });
    (await s.next()).fail();
    await settle();
    c.remind({ id: 'b' }); // its last signal failed: goes out again at once
    expect(s.made.map((x) => x.id)).toEqual(['a', 'a', 'b', 'b']);
    (await s.next()).ok();
    await settle();
    expect(c.inFlight()).toBe(0);
  });
});
