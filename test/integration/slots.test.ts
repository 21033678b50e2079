import { createTestDb, type TestDb } from '../helpers/db';
import { DEFAULT_SLOT_SETTINGS, HostSlots } from '../../src/db/slots';

// The host slots' rules in Postgres itself (migration 010), many callers at once where it matters.
let tdb: TestDb;
beforeAll(async () => {
  tdb = await createTestDb();
});
afterAll(async () => {
  await tdb.drop();
});

const slots = (capacity: number) => new HostSlots(tdb.db, { ...DEFAULT_SLOT_SETTINGS, capacity });

it('never more than the bound on the wire, however many ask at once', async () => {
  const s = slots(3);
  const r = await Promise.all(
    Array.from({ length: 30 }, (_, i) => s.acquire('burst:443', `h${i}`, 't', 'push')),
  );
  expect(r.filter((x) => x.acquired)).toHaveLength(3);
  const rows = await tdb.db.query(`SELECT count(*) AS n FROM outbound_waiters WHERE target = 'burst:443'`);
  expect(Number(rows.rows[0].n)).toBe(27);
});

it('freed slots go to waiters round robin by tenant, each tenant in arrival order', async () => {
  const s = slots(1);
  expect((await s.acquire('rr:443', 'first', 'a', 'push')).acquired).toBe(true);
  for (const [h, t] of [
    ['a1', 'a'],
    ['a2', 'a'],
    ['a3', 'a'],
    ['b1', 'b'],
    ['c1', 'c'],
  ] as const)
    expect((await s.acquire('rr:443', h, t, 'push')).acquired).toBe(false);
  const order: string[] = [];
  let holder = 'first';
  for (let i = 0; i < 5; i++) {
    const granted = await s.release('rr:443', holder, 'neutral');
    expect(granted).toHaveLength(1);
    holder = granted[0]!;
    // The grantee comes and takes its slot.
    expect((await s.acquire('rr:443', holder, '?', 'push')).acquired).toBe(true);
    order.push(holder);
  }
  expect(order).toEqual(['b1', 'c1', 'a1', 'a2', 'a3']);
});

/** Puts a target in the slow lane (as a call that timed out would): its line is strict. */
const markSuspect = (target: string) =>
  tdb.db.query(
    `INSERT INTO outbound_targets (target, suspect_until) VALUES ($1, now() + interval '1 hour')
     ON CONFLICT (target) DO UPDATE SET suspect_until = excluded.suspect_until`,
    [target],
  );

it('a grant not taken in time goes back in line at its place, ahead of those who came later (slow lane)', async () => {
  const s = slots(1);
  await markSuspect('late:443');
  await s.acquire('late:443', 'holder', 't', 'push');
  await s.acquire('late:443', 'slow', 't', 'push');
  await s.acquire('late:443', 'later', 't', 'push');
  expect(await s.release('late:443', 'holder', 'neutral')).toEqual(['slow']);
  // `slow` does not come in time: its grant runs out.
  await tdb.db.query(
    `UPDATE outbound_slots SET expires_at = now() - interval '1 second' WHERE holder = 'slow'`,
  );
  const again = await s.acquire('late:443', 'later', 't', 'push');
  expect(again.acquired).toBe(false);
  expect(again.granted).toEqual(['slow']);
  expect((await s.acquire('late:443', 'slow', 't', 'push')).acquired).toBe(true);
});

it('a slot whose holder died comes back when its lease runs out', async () => {
  const s = slots(1);
  expect((await s.acquire('dead:443', 'killed', 't', 'push')).acquired).toBe(true);
  expect((await s.acquire('dead:443', 'next', 't', 'push')).acquired).toBe(false);
  await tdb.db.query(
    `UPDATE outbound_slots SET expires_at = now() - interval '1 second' WHERE holder = 'killed'`,
  );
  expect((await s.acquire('dead:443', 'next', 't', 'push')).acquired).toBe(true);
});

it('a target in the slow lane gives a fast-lane call nothing, and a 2xx clears the mark', async () => {
  const s = slots(2);
  await s.acquire('sus:443', 'x', 't', 'push');
  await s.release('sus:443', 'x', 'suspect');
  expect(await s.acquire('sus:443', 'fast', 't', 'push', true)).toEqual({
    acquired: false,
    suspect: true,
    granted: [],
  });
  expect(await s.acquire('sus:443', 'slow', 't', 'push')).toMatchObject({ acquired: true, suspect: true });
  await s.release('sus:443', 'slow', 'healthy');
  expect(await s.acquire('sus:443', 'fast', 't', 'push', true)).toMatchObject({
    acquired: true,
    suspect: false,
  });
});

it("a healthy target's line is work-conserving: a soft grant keeps no slot empty, and a grantee that lost the race goes back at its place with a firm grant next", async () => {
  const s = slots(1);
  expect((await s.acquire('soft:443', 'holder', 'a', 'push')).acquired).toBe(true);
  expect((await s.acquire('soft:443', 'w1', 'b', 'push')).acquired).toBe(false);
  expect((await s.acquire('soft:443', 'w2', 'b', 'push')).acquired).toBe(false);
  // The release wakes w1 but keeps nothing empty for it: a newcomer takes the room first.
  expect(await s.release('soft:443', 'holder', 'healthy')).toEqual(['w1']);
  expect((await s.acquire('soft:443', 'n1', 'a', 'push')).acquired).toBe(true);
  // w1 comes to a full target: back in line, ahead of w2, marked for a firm grant.
  expect((await s.acquire('soft:443', 'w1', 'b', 'push')).acquired).toBe(false);
  const line = await tdb.db.query<{ holder: string; bumped: boolean }>(
    `SELECT holder, bumped FROM outbound_waiters WHERE target = 'soft:443' ORDER BY seq`,
  );
  expect(line.rows).toEqual([
    { holder: 'w1', bumped: true },
    { holder: 'w2', bumped: false },
  ]);
  // Its next grant is firm: a newcomer waits behind it now, and w1 gets the slot.
  expect(await s.release('soft:443', 'n1', 'healthy')).toEqual(['w1']);
  expect((await s.acquire('soft:443', 'n2', 'a', 'push')).acquired).toBe(false);
  expect((await s.acquire('soft:443', 'w1', 'b', 'push')).acquired).toBe(true);
  // w2, woken on its own (its recheck) while w1 holds the slot, waits.
  expect((await s.acquire('soft:443', 'w2', 'b', 'push')).acquired).toBe(false);
});

it('soft grants never let more than the bound on the wire, however many newcomers and grantees race', async () => {
  const s = slots(3);
  const target = 'race:443';
  for (let i = 0; i < 3; i++) expect((await s.acquire(target, `h${i}`, 't', 'push')).acquired).toBe(true);
  for (let i = 0; i < 6; i++) expect((await s.acquire(target, `w${i}`, 'u', 'push')).acquired).toBe(false);
  const granted = (await Promise.all([0, 1, 2].map((i) => s.release(target, `h${i}`, 'healthy')))).flat();
  expect(granted).toHaveLength(3);
  // The three grantees and twenty newcomers all at once.
  const all = [...granted, ...Array.from({ length: 20 }, (_, i) => `n${i}`)];
  const r = await Promise.all(all.map((h) => s.acquire(target, h, h.startsWith('n') ? 'n' : 'u', 'push')));
  expect(r.filter((x) => x.acquired)).toHaveLength(3);
  const onWire = await tdb.db.query(
    `SELECT count(*) AS n FROM outbound_slots WHERE target = $1 AND NOT granted`,
    [target],
  );
  expect(Number(onWire.rows[0].n)).toBe(3);
});
