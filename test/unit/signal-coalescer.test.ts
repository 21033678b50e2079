import { SignalCoalescer } from '../../src/inbox/app';

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('SignalCoalescer', () => {
  it('signals at once, folds a burst into one trailing signal spaced by the interval, then is quiet', async () => {
    const sent: Array<{ id: string; at: number }> = [];
    let release: (() => void) | undefined;
    const c = new SignalCoalescer<{ id: string }>(async (t) => {
      sent.push({ id: t.id, at: Date.now() });
      await new Promise<void>((r) => (release = r));
    }, 200);
    c.signal({ id: 'a' });
    expect(sent).toHaveLength(1); // the first one goes out at once
    for (let i = 0; i < 50; i++) c.signal({ id: 'a' }); // a burst while it is in flight
    expect(sent).toHaveLength(1);
    release!();
    await tick(50);
    expect(sent).toHaveLength(1); // the trailing signal waits for the interval
    await tick(250);
    expect(sent).toHaveLength(2);
    expect(sent[1]!.at - sent[0]!.at).toBeGreaterThanOrEqual(195);
    release!();
    await tick(20);
    expect(c.inFlight()).toBe(0); // nothing new came: no third signal
    expect(sent).toHaveLength(2);
  });

  it('keeps registrations apart, and a failed send still sends the newer callbacks’ signal', async () => {
    const sent: string[] = [];
    let fail = true;
    const c = new SignalCoalescer<{ id: string }>(async (t) => {
      sent.push(t.id);
      await tick(10);
      if (fail) {
        fail = false;
        throw new Error('unavailable');
      }
    }, 30);
    c.signal({ id: 'a' });
    c.signal({ id: 'b' });
    c.signal({ id: 'a' });
    expect(sent).toEqual(['a', 'b']);
    await tick(100);
    expect(sent).toEqual(['a', 'b', 'a']);
    expect(c.inFlight()).toBe(0);
  });

  it('remind signals a registration only when this process has not signalled it within the refresh time, or its last signal failed', async () => {
    const sent: string[] = [];
    let fail = false;
    const c = new SignalCoalescer<{ id: string }>(
      async (t) => {
        sent.push(t.id);
        if (fail) throw new Error('unavailable');
      },
      10,
      150,
    );
    c.remind({ id: 'a' }); // never signalled here: goes out
    await tick(20);
    expect(sent).toEqual(['a']);
    for (let i = 0; i < 20; i++) c.remind({ id: 'a' }); // signalled just now: the workflow drains these
    await tick(20);
    expect(sent).toEqual(['a']);
    await tick(200); // past the refresh time: one more, in case the last one was lost
    c.remind({ id: 'a' });
    await tick(20);
    expect(sent).toEqual(['a', 'a']);
    fail = true;
    c.signal({ id: 'b' }); // fails
    await tick(20);
    fail = false;
    c.remind({ id: 'b' }); // its last signal failed: goes out again at once
    await tick(20);
    expect(sent).toEqual(['a', 'a', 'b', 'b']);
  });
});
