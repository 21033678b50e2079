/**
 * Inbox flood: 20,000 valid callbacks from 8 concurrent senders against bounds of 64 per registration
 * and 10,000 in total, over 200 registrations (20 of them hot). Every answer is 200 or 429 (with
 * Retry-After: 5), every 200 is a stored row, and once the backlog drains the inbox accepts again.
 *
 * Round 1 floods while no worker runs, so nothing drains and the bounds are met: each hot registration
 * holds exactly 64 rows and the inbox 10,000 (plus at most one per sender: the total is checked
 * without a lock). A worker then drains the backlog (GetTask per
 * registration marks the rows processed), and the inbox accepts again. Round 2 floods as many again
 * with the worker reconciling meanwhile. The inbox's peak RSS (VmHWM) is reported, not asserted.
 *
 * Real processes: `src/main.ts api|inbox|worker` as children, the run's dev server and Postgres (a
 * database of this file's own), an `@a2a-js/sdk` agent on 127.0.0.1 answering GetTask.
 */
import { Pool } from 'undici';
import { startTestAgent, type TestAgent } from '../helpers/agent';
import { createTestDb, type TestDb } from '../helpers/db';
import { eventually } from '../helpers/harness';
import { apiCall, peakRssKb, ready, serviceEnv, spawnService, stopAll, type Svc } from './helpers/procs';

const REGISTRATIONS = 200;
const HOT = 20;
const CALLBACKS = 20_000;
const HOT_SHARE = 4_000; // 200 each to the hot registrations, the rest spread over the others
const SENDERS = 8;
const PER_REGISTRATION = 64;
const TOTAL = 10_000;

let tdb: TestDb;
let agent: TestAgent;
let env: Record<string, string>;
let api: Svc;
let inbox: Svc;
const svcs: Svc[] = [];
const regs: Array<{ id: string; credential: string; remoteTaskId: string }> = [];
let pool: Pool;

beforeAll(async () => {
  tdb = await createTestDb();
  agent = await startTestAgent();
  env = serviceEnv({
    databaseUrl: tdb.url,
    temporalAddress: process.env.TEST_TEMPORAL_ADDRESS!,
    extra: {
      INBOX_BOUND_PER_REGISTRATION: String(PER_REGISTRATION),
      INBOX_BOUND_TOTAL: String(TOTAL),
    },
  });
  api = await spawnService('api', env);
  inbox = await spawnService('inbox', env);
  svcs.push(api, inbox);
  await Promise.all([ready(api), ready(inbox)]);
  pool = new Pool(`http://127.0.0.1:${inbox.port}`, { connections: SENDERS, pipelining: 1 });
  const key = env.BOOTSTRAP_API_KEY!;
  for (let i = 0; i < REGISTRATIONS; i++) {
    const remoteTaskId = `flood-${i}`;
    agent.setState(remoteTaskId, 'TASK_STATE_WORKING');
    const r = await apiCall(api, key, 'POST', '/v1/registrations', {
      mode: 'embedded',
      agent: { url: agent.url },
    });
    expect(r.status).toBe(201);
    const t = await apiCall(api, key, 'POST', `/v1/registrations/${r.json.id}/remote-task`, { remoteTaskId });
    expect(t.status).toBe(200);
    regs.push({
      id: r.json.id,
      credential: r.json.pushNotificationConfig.authentication.credentials,
      remoteTaskId,
    });
  }
});

afterAll(async () => {
  await pool?.close();
  await stopAll(svcs);
  await agent?.close();
  await tdb?.drop();
});

/** A seeded order of registration indexes: HOT_SHARE to the hot ones, the rest spread evenly, shuffled. */
function plan(total: number, hotShare: number, seed: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < hotShare; i++) out.push(i % HOT);
  for (let i = 0; i < total - hotShare; i++) out.push(HOT + (i % (REGISTRATIONS - HOT)));
  let s = seed >>> 0;
  const next = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296;
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

interface Round {
  ok: number[];
  limited: number;
  other: string[];
  seconds: number;
}

/** Sends the plan's callbacks from SENDERS concurrent senders; callback k carries `metadata.k`. */
async function flood(order: number[], firstK: number): Promise<Round> {
  const round: Round = { ok: [], limited: 0, other: [], seconds: 0 };
  let next = 0;
  const t0 = Date.now();
  const sender = async () => {
    for (;;) {
      const i = next++;
      if (i >= order.length) return;
      const reg = regs[order[i]!]!;
      const k = firstK + i;
      const res = await pool.request({
        method: 'POST',
        path: `/a2a/push/${reg.id}`,
        headers: { 'content-type': 'application/a2a+json', authorization: `Bearer ${reg.credential}` },
        body: JSON.stringify({
          statusUpdate: {
            taskId: reg.remoteTaskId,
            status: { state: 'TASK_STATE_WORKING' },
            metadata: { k },
          },
        }),
      });
      await res.body.text();
      if (res.statusCode === 200) round.ok.push(k);
      else if (res.statusCode === 429 && res.headers['retry-after'] === '5') round.limited += 1;
      else round.other.push(`${res.statusCode} ${String(res.headers['retry-after'])}`);
    }
  };
  await Promise.all(Array.from({ length: SENDERS }, sender));
  round.seconds = (Date.now() - t0) / 1000;
  return round;
}

/** Every 200 is a row: the stored rows with k in [from, to) are exactly the accepted ones. */
async function storedKs(from: number, to: number): Promise<number[]> {
  const r = await tdb.db.query<{ k: number }>(
    `SELECT (body::json #>> '{statusUpdate,metadata,k}')::int AS k FROM inbox_callbacks
      WHERE (body::json #>> '{statusUpdate,metadata,k}')::int >= $1 AND (body::json #>> '{statusUpdate,metadata,k}')::int < $2`,
    [from, to],
  );
  return r.rows.map((x) => x.k).sort((a, b) => a - b);
}

const pending = async () =>
  Number(
    (
      await tdb.db.query<{ n: string }>(
        'SELECT count(*) AS n FROM inbox_callbacks WHERE processed_at IS NULL',
      )
    ).rows[0]!.n,
  );

/** The bound counters: per registration (migration 005), and the total from the id sequence (007). */
async function counters() {
  const per = await tdb.db.query<{ id: string; inbox_pending: number }>(
    'SELECT id, inbox_pending FROM registrations',
  );
  const total = await tdb.db.query<{ n: string }>('SELECT inbox_unprocessed_total() AS n');
  return {
    perRegistration: Object.fromEntries(per.rows.map((r) => [r.id, r.inbox_pending])),
    total: Number(total.rows[0]!.n),
  };
}

it('20,000 callbacks, 8 senders, bounds 64/10,000: every answer 200 or 429, every 200 a row, accepts again after the drain', async () => {
  // Round 1, no worker: nothing drains, so the bounds are met exactly.
  const r1 = await flood(plan(CALLBACKS, HOT_SHARE, 1), 0);
  expect(r1.other).toEqual([]);
  expect(r1.ok.length + r1.limited).toBe(CALLBACKS);
  // The total bound is checked against the sequence-based count without a lock: it may be passed by at most
  // the callbacks being stored at that instant (one per sender here). Per registration it is exact.
  expect(r1.ok.length).toBeGreaterThanOrEqual(TOTAL);
  expect(r1.ok.length).toBeLessThan(TOTAL + SENDERS);
  expect(await storedKs(0, CALLBACKS)).toEqual([...r1.ok].sort((a, b) => a - b));
  const perReg = await tdb.db.query<{ registration_id: string; n: string }>(
    'SELECT registration_id, count(*) AS n FROM inbox_callbacks GROUP BY registration_id',
  );
  const count = new Map(perReg.rows.map((r) => [r.registration_id, Number(r.n)]));
  for (const reg of regs.slice(0, HOT)) expect(count.get(reg.id)).toBe(PER_REGISTRATION);
  for (const reg of regs) expect(count.get(reg.id) ?? 0).toBeLessThanOrEqual(PER_REGISTRATION);
  // The counters agree with the rows.
  expect(await counters()).toEqual({
    perRegistration: Object.fromEntries(regs.map((r) => [r.id, count.get(r.id) ?? 0])),
    total: r1.ok.length,
  });
  const full = await pool.request({
    method: 'POST',
    path: `/a2a/push/${regs[HOT]!.id}`,
    headers: { 'content-type': 'application/a2a+json', authorization: `Bearer ${regs[HOT]!.credential}` },
    body: JSON.stringify({ statusUpdate: { taskId: 'x', status: { state: 'TASK_STATE_WORKING' } } }),
  });
  await full.body.text();
  expect(full.statusCode).toBe(429);

  // A worker drains the backlog: every registration's GetTask marks its rows processed.
  const t0 = Date.now();
  const worker = await spawnService('worker', env);
  svcs.push(worker);
  await ready(worker);
  await eventually(pending, (n) => n === 0, 300_000);
  expect(await counters()).toEqual({
    perRegistration: Object.fromEntries(regs.map((r) => [r.id, 0])),
    total: 0,
  });
  const drainSeconds = (Date.now() - t0) / 1000;
  const getTasks = agent.calls.filter((c) => c.kind === 'getTask').length;

  // Accepts again: one callback to each registration, every one 200.
  const again = await flood(
    regs.map((_, i) => i),
    CALLBACKS,
  );
  expect(again.ok).toHaveLength(REGISTRATIONS);
  expect(await storedKs(CALLBACKS, CALLBACKS + REGISTRATIONS)).toHaveLength(REGISTRATIONS);

  // Round 2, with the worker reconciling meanwhile.
  const base2 = CALLBACKS + REGISTRATIONS;
  const r2 = await flood(plan(CALLBACKS, HOT_SHARE, 2), base2);
  expect(r2.other).toEqual([]);
  expect(r2.ok.length + r2.limited).toBe(CALLBACKS);
  expect(await storedKs(base2, base2 + CALLBACKS)).toEqual([...r2.ok].sort((a, b) => a - b));
  await eventually(pending, (n) => n === 0, 300_000);
  expect((await counters()).total).toBe(0);

  // The registrations stayed active: the callback bodies decided nothing.
  const statuses = await tdb.db.query<{ status: string; n: string }>(
    'SELECT status, count(*) AS n FROM registrations GROUP BY status',
  );
  expect(statuses.rows).toEqual([{ status: 'active', n: String(REGISTRATIONS) }]);

  const rssMb = Math.round(peakRssKb(inbox.proc.pid!) / 1024);
  process.stdout.write(
    `inbox-flood: round 1 (no worker) ${r1.ok.length} × 200, ${r1.limited} × 429 in ${r1.seconds.toFixed(1)} s ` +
      `(${Math.round(CALLBACKS / r1.seconds)} callbacks/s); drained in ${drainSeconds.toFixed(1)} s with ${getTasks} GetTask calls; ` +
      `accepts again ${again.ok.length}/${REGISTRATIONS}; round 2 (worker on) ${r2.ok.length} × 200, ${r2.limited} × 429 ` +
      `in ${r2.seconds.toFixed(1)} s; inbox peak RSS ${rssMb} MB\n`,
  );
});
