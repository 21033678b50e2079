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

it('a grant not taken in time goes back in line at its place, ahead of those who came later', async () => {
  const s = slots(1);
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
