/**
 * Ordered delivery (DELIVERY_ORDER=per_config, the default) through faults: a config's pushes reach
 * the receiver in the order of X-A2A-Push-Sequence, whatever dies on the way.
 * - A worker killed (SIGKILL) while the head of a line is on the wire, five events queued behind it: a
 *   new worker redelivers the head (its killed attempt recorded `interrupted`), then the rest in order;
 *   no later event reaches the receiver before the head's redelivery; one duplicate (the head's). With
 *   the same kill, a second line whose head was superseded (pushed out of the bound) while on the
 *   wire: nothing later of it goes out until the head's attempt is recorded `interrupted`; the head is
 *   not sent again.
 * - The Temporal dev server killed (SIGKILL) with a line of 20 on one config (the head answered 503
 *   twice, its third POST held by the receiver), the head answered while the server is down, five more
 *   events acknowledged while it is down (their starts refused: the dispatcher's sweep starts them
 *   after the restart, in any order); the server started again on the same file: all 25 arrive in order.
 * - Postgres stopped (fast shutdown) while the third job of a line is on the wire and answered while it
 *   is down, so its outcome cannot be recorded: after the restart the attempt is recorded `interrupted`
 *   and resent (one duplicate), then the rest of the line follows in order.
 * Each case prints how long it took and how long its line waited after the fault.
 *
 * Real processes: embedded Postgres and the dev server of this file's own (children, restarted on the
 * same data), `src/main.ts api` and `src/main.ts worker` as children, a scripted HTTPS receiver.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { Connection, Client } from '@temporalio/client';
import { startDevServer, type DevServer } from '../../src/embedded/temporal';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { eventually } from '../helpers/harness';
import { freePort } from '../helpers/test-services-port';
import { startReceiver, type ReceivedRequest, type Receiver } from '../helpers/receiver';
import {
  alive,
  killHard,
  createConfigVia,
  ready,
  serviceEnv,
  sleep,
  spawnService,
  startOwnPg,
  stopAll,
  type OwnPg,
  type Svc,
  writeEventVia,
} from './helpers/procs';

let pg: OwnPg;
/** Reconnects by itself after the Postgres restart. */
let db: Pool | undefined;
let server: DevServer | undefined;
let temporalPort: number;
let dbFile: string;
let receiver: Receiver;
let env: Record<string, string>;
let api: Svc;
let worker: Svc;
const svcs: Svc[] = [];

/** Held answers: the test releases them (or the worker's death closes them). */
const gates = new Map<string, () => void>();
const hold = (name: string) => new Promise<void>((resolve) => gates.set(name, resolve));
const release = (name: string) => gates.get(name)?.();

const seqOf = (r: ReceivedRequest) => Number(r.headers['x-a2a-push-sequence']);
const deliveryOf = (r: ReceivedRequest) => String(r.headers['x-a2a-push-delivery']);
const on = (p: string) => receiver.requests.filter((r) => r.path === p);
/** How many requests of this sequence number the path had before this one (0 for its first). */
const earlier = (r: ReceivedRequest) =>
  receiver.requests.filter((x) => x.n < r.n && x.path === r.path && seqOf(x) === seqOf(r)).length;

beforeAll(async () => {
  pg = await startOwnPg();
  temporalPort = await freePort();
  dbFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-fault-order-')), 'temporal.db');
  server = await startDevServer({ port: temporalPort, dbFile });
  receiver = await startReceiver({
    script: (req) => {
      const seq = seqOf(req);
      const before = earlier(req);
      // /kill: the head's first POST is never answered; the worker dies with it on the wire.
      if (req.path === '/kill' && seq === 1 && before === 0) return { hang: true };
      // /sup: the same, for a head superseded while on the wire.
      if (req.path === '/sup' && seq === 1 && before === 0) return { hang: true };
      // /temporal: the head is answered 503 twice, then its third POST is held until the test says.
      if (req.path === '/temporal' && seq === 1 && before < 2) return { status: 503 };
      if (req.path === '/temporal' && seq === 1 && before === 2)
        return { status: 200, gate: hold('temporal') };
      // /pg: the third event's first POST is held until the test says.
      if (req.path === '/pg' && seq === 3 && before === 0) return { status: 200, gate: hold('pg') };
      return { status: 200 };
    },
  });
  env = serviceEnv({
    databaseUrl: pg.url,
    temporalAddress: server.address,
    // A held POST stays on the wire until the test ends it (not the 2 s of FAST).
    // 31 events on /sup push its head out of the bound (30) while it is on the wire.
    extra: { DELIVERY_TIMEOUT: '60s', DELIVERY_ORDER: 'per_config', OUTBOX_BOUND_PER_CONFIG: '30' },
  });
  api = await spawnService('api', env);
  worker = await spawnService('worker', env);
  svcs.push(api, worker);
  await Promise.all([ready(api), ready(worker)]);
  db = new Pool({ connectionString: pg.url, max: 2 });
  db.on('error', () => undefined);
});

afterAll(async () => {
  for (const r of gates.values()) r();
  await db?.end().catch(() => undefined);
  await stopAll(svcs);
  await server?.stop();
  await receiver?.close();
  await pg?.remove();
  if (dbFile) fs.rmSync(path.dirname(dbFile), { recursive: true, force: true });
});

const key = () => env.BOOTSTRAP_API_KEY!;
const base = () => receiver.url.replace(/\/hook$/, '');

const config = (taskId: string, p: string) => createConfigVia(api, key(), taskId, `${base()}${p}`);

async function events(taskId: string, from: number, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = from; i < from + count; i++) {
    ids.push(await writeEventVia(api, key(), taskId, { i }));
  }
  return ids;
}

interface JobRow {
  id: string;
  push_seq: string;
  status: string;
  held_by: string | null;
  dispatched: boolean;
  finished_at: Date | null;
}
const jobs = async (ids: string[]) =>
  (
    await db!.query<JobRow>(
      `SELECT id, push_seq, status, held_by, dispatched_at IS NOT NULL AS dispatched, finished_at
         FROM delivery_jobs WHERE id = ANY($1::uuid[]) ORDER BY seq`,
      [ids],
    )
  ).rows;

interface AttemptRow {
  job_id: string;
  n: number;
  outcome: string | null;
  http_status: number | null;
  started_at: Date;
}
const attempts = async (ids: string[]) =>
  (
    await db!.query<AttemptRow>(
      `SELECT job_id, n, outcome, http_status, started_at FROM delivery_attempts
        WHERE job_id = ANY($1::uuid[]) ORDER BY job_id, n`,
      [ids],
    )
  ).rows;

const allDelivered = (rows: JobRow[], n: number) =>
  rows.length === n && rows.every((r) => r.status === 'delivered');

/**
 * What every case proves about one line (`ids` in event order, numbered 1..n; all delivered but the
 * `superseded` ones): each request carries its job's number and event; the numbers arrive in order (a
 * repeat only right after itself); each job's first attempt started after the job before it had ended;
 * every attempt row is one request (an `interrupted` one at most one unanswered request). Returns the
 * duplicates seen.
 */
/** How far a workflow task's time may precede the activity it schedules (see checkLine). */
const WORKFLOW_TASK_SLACK_MS = 1_000;

async function checkLine(
  p: string,
  ids: string[],
  superseded: string[] = [],
): Promise<{ duplicates: number; arrivals: number[] }> {
  const rows = await jobs(ids);
  expect(rows.map((r) => r.id)).toEqual(ids);
  expect(rows.map((r) => r.status)).toEqual(
    ids.map((id) => (superseded.includes(id) ? 'superseded' : 'delivered')),
  );
  expect(rows.map((r) => Number(r.push_seq))).toEqual(ids.map((_, i) => i + 1));
  const got = on(p);
  for (const r of got) {
    const seq = seqOf(r);
    expect(deliveryOf(r)).toBe(ids[seq - 1]);
    expect(JSON.parse(r.body.toString())).toMatchObject({ statusUpdate: { metadata: { i: seq - 1 } } });
  }
  const arrivals = got.map(seqOf);
  // In order of X-A2A-Push-Sequence: never a smaller number after a larger one, every number seen.
  expect(arrivals).toEqual([...arrivals].sort((a, b) => a - b));
  expect([...new Set(arrivals)]).toEqual(ids.map((_, i) => i + 1));

  const all = await attempts(ids);
  let duplicates = 0;
  for (let k = 0; k < ids.length; k++) {
    const mine = all.filter((a) => a.job_id === ids[k]);
    expect(mine.map((a) => a.n)).toEqual(mine.map((_, i) => i + 1));
    expect(mine.every((a) => a.outcome !== null)).toBe(true);
    if (!superseded.includes(ids[k]!))
      expect(mine.at(-1)).toMatchObject({ outcome: 'delivered', http_status: 200 });
    const requests = got.filter((r) => deliveryOf(r) === ids[k]).length;
    const answered = mine.filter((a) => a.http_status !== null).length;
    const interrupted = mine.filter((a) => a.outcome === 'interrupted').length;
    expect(requests).toBeGreaterThanOrEqual(answered);
    expect(requests).toBeLessThanOrEqual(answered + interrupted);
    // A duplicate: the event arrived again though no answer of the receiver asked for it again (its
    // first arrival, and one after each non-2xx answer, are not).
    const refused = mine.filter((a) => a.http_status !== null && a.outcome !== 'delivered').length;
    duplicates += Math.max(0, requests - refused - 1);
    // Its first attempt started once the job before it had ended (Postgres' clock and the workflow's
    // are the same machine's). started_at is workflow time: when the workflow task that scheduled the
    // attempt started, which may precede the activity's own check by a moment (seen: 47 ms, a recheck
    // timer that fired just before the job ahead ended); the receiver's order is checked above.
    if (k > 0)
      expect(mine[0]!.started_at.getTime()).toBeGreaterThanOrEqual(
        rows[k - 1]!.finished_at!.getTime() - WORKFLOW_TASK_SLACK_MS,
      );
  }
  return { duplicates, arrivals };
}

const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/**
 * How each workflow's waits for the job before it ended, from its history: woken (timer cancelled, or
 * a start delay ended by a `wake` signal-with-start) or by its recheck (the timer firing, or the start
 * delay running out: a wake that never came). Returns the rechecks that fired, as "#k after N s".
 */
async function rechecksFired(ids: string[]): Promise<string[]> {
  const connection = await Connection.connect({ address: server!.address });
  const fired: string[] = [];
  try {
    const client = new Client({ connection });
    for (const [k, id] of ids.entries()) {
      const h = await client.workflow.getHandle(makeDeliveryWorkflowId(id)).fetchHistory();
      const inLine = new Map<string, number>();
      const events = h.events ?? [];
      // A job written behind another starts delayed; its first workflow task without a wake before it
      // is the delay's end.
      const delay = Number(
        events[0]?.workflowExecutionStartedEventAttributes?.firstWorkflowTaskBackoff?.seconds ?? 0,
      );
      const firstTask = events.findIndex((e) => e.workflowTaskScheduledEventAttributes);
      const woken = events.findIndex(
        (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'wake',
      );
      if (delay > 0 && firstTask >= 0 && (woken < 0 || woken > firstTask))
        fired.push(`#${k + 1} after its start delay of ${delay} s`);
      for (const e of events) {
        const a = e.timerStartedEventAttributes;
        const data = e.userMetadata?.summary?.data;
        const summary = data ? (JSON.parse(Buffer.from(data).toString()) as string) : '';
        if (a && summary.startsWith('waiting for delivery '))
          inLine.set(String(e.eventId), Number(a.startToFireTimeout?.seconds ?? 0));
        const f = e.timerFiredEventAttributes;
        if (f && inLine.has(String(f.startedEventId)))
          fired.push(`#${k + 1} after ${inLine.get(String(f.startedEventId))} s`);
      }
    }
  } finally {
    await connection.close();
  }
  return fired;
}

/**
 * How many times the job's last attempt call ran (more than once: Temporal ran it again). A slow-lane
 * (or classic) attempt is an activity: its last start's attempt number. A lean fast-lane attempt is a
 * local activity inside a workflow task: the attempt number of the task that recorded its marker
 * (Temporal writes a failed or timed-out task's retries to history only once one completes, with their
 * count in the completed one's `attempt`).
 */
async function lastAttemptRuns(id: string): Promise<number> {
  const connection = await Connection.connect({ address: server!.address });
  try {
    const events =
      (await new Client({ connection }).workflow.getHandle(makeDeliveryWorkflowId(id)).fetchHistory())
        .events ?? [];
    const last = events.findLastIndex(
      (e) =>
        e.activityTaskScheduledEventAttributes ||
        e.markerRecordedEventAttributes?.markerName === 'core_local_activity',
    );
    if (last < 0) return 0;
    if (events[last]!.activityTaskScheduledEventAttributes) {
      const scheduledId = String(events[last]!.eventId);
      const starts = events.filter(
        (e) => String(e.activityTaskStartedEventAttributes?.scheduledEventId ?? '') === scheduledId,
      );
      return starts.at(-1)?.activityTaskStartedEventAttributes?.attempt ?? 0;
    }
    // The marker follows the completion of the task that ran it, which follows that task's scheduling.
    const scheduled = events.slice(0, last).findLast((e) => e.workflowTaskScheduledEventAttributes);
    return scheduled?.workflowTaskScheduledEventAttributes?.attempt ?? 0;
  } finally {
    await connection.close();
  }
}

/** Whether every job but the first has made its check: held back (or, were the order broken, gone out). */
const checked = (rows: JobRow[]) => rows.slice(1).every((r) => r.held_by !== null || r.status !== 'queued');

it('worker SIGKILLed mid-POST of the heads of two lines (one superseded meanwhile): nothing later goes out before the head ended, then the rest in order', async () => {
  const t0 = Date.now();
  await config('order-kill', '/kill');
  await config('order-sup', '/sup');
  const ids = await events('order-kill', 0, 6);
  // /sup: its head on the wire, then 30 more events: the head is superseded (the bound is 30) while
  // its POST is held, and still holds its line until its attempt has an outcome.
  const sup = await events('order-sup', 0, 1);
  await eventually(
    async () => on('/sup').length,
    (n) => n >= 1,
    60_000,
  );
  sup.push(...(await events('order-sup', 1, 30)));

  // Both heads are on the wire, held; every job behind them has made its check.
  const before = await eventually(
    async () => ({ kill: await jobs(ids), sup: await jobs(sup) }),
    (v) => on('/kill').length >= 1 && checked(v.kill) && checked(v.sup),
    60_000,
  );
  // Each waits for the one before it, and nothing but the heads went out.
  expect(before.kill.slice(1).map((r) => [r.status, r.held_by])).toEqual(
    ids.slice(0, -1).map((id) => ['queued', id]),
  );
  expect(before.sup[0]!.status).toBe('superseded');
  expect(before.sup.slice(1).map((r) => [r.status, r.held_by])).toEqual(
    sup.slice(0, -1).map((id) => ['queued', id]),
  );
  expect(on('/kill').map(seqOf)).toEqual([1]);
  expect(on('/sup').map(seqOf)).toEqual([1]);
  await killHard(worker);
  const killedAt = Date.now();

  worker = await spawnService('worker', env);
  svcs.push(worker);
  await ready(worker);
  // While the superseded head's attempt has no outcome, nothing later of its line has gone out (the
  // receiver is read first: a request seen then was made while the outcome was still missing).
  const headEnded = await eventually(
    async () => {
      const sent = on('/sup').map(seqOf);
      const [head] = await attempts([sup[0]!]);
      if (head!.outcome === null) expect(sent).toEqual([1]);
      return head!.outcome;
    },
    (o) => o !== null,
    60_000,
  );
  expect(headEnded).toBe('interrupted');
  await eventually(
    async () => [...(await jobs(ids)), ...(await jobs(sup.slice(1)))],
    (rows) => allDelivered(rows, ids.length + sup.length - 1),
    120_000,
  );

  const { duplicates, arrivals } = await checkLine('/kill', ids);
  // The head twice (the killed POST and its redelivery), then each later event once, after it.
  expect(arrivals).toEqual([1, 1, 2, 3, 4, 5, 6]);
  expect(duplicates).toBeLessThanOrEqual(1);
  const rows = await attempts(ids);
  expect(rows.filter((a) => a.job_id === ids[0])).toEqual([
    expect.objectContaining({ n: 1, outcome: 'interrupted', http_status: null }),
    expect.objectContaining({ n: 2, outcome: 'delivered', http_status: 200 }),
  ]);
  for (const id of ids.slice(1))
    expect(rows.filter((a) => a.job_id === id)).toEqual([
      expect.objectContaining({ n: 1, outcome: 'delivered', http_status: 200 }),
    ]);
  // The superseded head is not sent again; its one attempt is interrupted; the others follow once each.
  const supLine = await checkLine('/sup', sup, [sup[0]!]);
  expect(supLine.arrivals).toEqual(sup.map((_, i) => i + 1));
  expect(await attempts([sup[0]!])).toEqual([
    expect.objectContaining({ n: 1, outcome: 'interrupted', http_status: null }),
  ]);

  const got = on('/kill');
  const gotSup = on('/sup');
  const fired = await rechecksFired([...ids, ...sup]);
  process.stdout.write(
    `ordered worker-kill: ${ids.length} + ${sup.length} jobs in order, duplicates ${duplicates} + ${supLine.duplicates}; ` +
      `the head redelivered ${secs(got[1]!.at - killedAt)} after the kill, the other ${ids.length - 1} within ` +
      `${secs(got.at(-1)!.at - got[1]!.at)} after it; the superseded head's line went on ${secs(gotSup[1]!.at - killedAt)} ` +
      `after the kill; rechecks fired: ${fired.join(', ') || 'none'}; ${secs(Date.now() - t0)} in all\n`,
  );
});

/** Longer than the SDK's retries of the activity's completion (10 s) and of the wake signal (~20 s). */
const TEMPORAL_DOWN_MS = 25_000;

it('Temporal dev server killed with a line of 20 on one config: after its restart all 25 (5 written while down) arrive in order', async () => {
  const t0 = Date.now();
  await config('order-temporal', '/temporal');
  const ids = await events('order-temporal', 0, 20);
  // The head's third POST on the wire (two 503s before it), the 19 behind it checked.
  const before = await eventually(
    () => jobs(ids),
    (rows) => on('/temporal').length >= 3 && checked(rows),
    60_000,
  );
  expect(before.slice(1).map((r) => [r.status, r.held_by])).toEqual(
    ids.slice(0, -1).map((id) => ['queued', id]),
  );
  expect(on('/temporal').map(seqOf)).toEqual([1, 1, 1]);

  server!.process.kill('SIGKILL');
  await new Promise((r) => server!.process.once('exit', r));
  const downAt = Date.now();
  // The head's POST is answered while the server is down: the job ends, its wake of #2 cannot be sent.
  release('temporal');
  await eventually(
    async () => (await jobs([ids[0]!]))[0]!.status,
    (s) => s === 'delivered',
    30_000,
  );
  // Five events acknowledged while it is down: their starts fail; the sweep starts them after.
  const more = await events('order-temporal', 20, 5);
  const whileDown = await jobs(more);
  expect(whileDown.every((r) => r.status === 'queued' && !r.dispatched)).toBe(true);
  await sleep(Math.max(0, downAt + TEMPORAL_DOWN_MS - Date.now()));
  expect(on('/temporal').map(seqOf)).toEqual([1, 1, 1]);

  // The restart's start: the server takes calls before startDevServer has seen it ready, so the line
  // may be delivered before the call returns.
  const restartAt = Date.now();
  server = await startDevServer({ port: temporalPort, dbFile });
  const all = [...ids, ...more];
  // Woken, the line needs seconds; a wake lost for good would leave it to a 5-minute recheck and fail here.
  await eventually(
    () => jobs(all),
    (rows) => allDelivered(rows, all.length),
    120_000,
  );

  const { duplicates, arrivals } = await checkLine('/temporal', all);
  expect(arrivals.slice(0, 3)).toEqual([1, 1, 1]);
  expect(duplicates).toBeLessThanOrEqual(1);
  expect(alive(api) && alive(worker)).toBe(true);

  // Every arrival after the kill: none can come while the server is down (the wake of #2 cannot be sent).
  const got = on('/temporal').filter((r) => r.at >= downAt);
  let gap = 0;
  let gapAt = '';
  for (let i = 1; i < got.length; i++)
    if (got[i]!.at - got[i - 1]!.at > gap) {
      gap = got[i]!.at - got[i - 1]!.at;
      gapAt = `#${seqOf(got[i - 1]!)} to #${seqOf(got[i]!)}`;
    }
  const fired = await rechecksFired(all);
  // Run twice: its completion was lost with the server, and the retried run (which finds the job
  // delivered and posts nothing) sent #2 its wake again.
  const headRuns = await lastAttemptRuns(ids[0]!);
  process.stdout.write(
    `ordered temporal-restart: ${all.length} jobs in order (${more.length} written while down), duplicates ` +
      `${duplicates}; down ${secs(restartAt - downAt)}; the head's last attempt ran ${headRuns} time(s); the first arrival after the kill (#${seqOf(got[0]!)}) came ${secs(got[0]!.at - restartAt)} after the restart began, ` +
      `all in ${secs(got.at(-1)!.at - restartAt)}, largest gap ${secs(gap)} (${gapAt}); ` +
      `rechecks fired: ${fired.join(', ') || 'none'}; ${secs(Date.now() - t0)} in all\n`,
  );
});

it('Postgres stopped while the third job of a line is on the wire: its attempt is recorded interrupted and resent, the line follows in order', async () => {
  const t0 = Date.now();
  await config('order-pg', '/pg');
  const ids = await events('order-pg', 0, 8);
  // #1 and #2 delivered, #3 on the wire (held), #4 to #8 checked.
  const before = await eventually(
    () => jobs(ids),
    (rows) => on('/pg').length >= 3 && checked(rows.slice(2)),
    60_000,
  );
  expect(before.slice(3).map((r) => [r.status, r.held_by])).toEqual(
    ids.slice(2, -1).map((id) => ['queued', id]),
  );
  expect(on('/pg').map(seqOf)).toEqual([1, 2, 3]);
  await pg.stop();
  const downAt = Date.now();
  // Answered while Postgres is down: the worker cannot record the outcome.
  release('pg');
  await sleep(5_000);
  expect(on('/pg').map(seqOf)).toEqual([1, 2, 3]);
  await pg.start();
  const upAt = Date.now();
  await eventually(
    () => jobs(ids),
    (rows) => allDelivered(rows, ids.length),
    120_000,
  );
  const { duplicates, arrivals } = await checkLine('/pg', ids);
  // #3 twice: its answer was lost with Postgres, so it is resent before #4 goes out.
  expect(arrivals).toEqual([1, 2, 3, 3, 4, 5, 6, 7, 8]);
  expect(duplicates).toBeLessThanOrEqual(1);
  expect((await attempts([ids[2]!])).map((a) => a.outcome)).toEqual(['interrupted', 'delivered']);
  const got = on('/pg');
  const fired = await rechecksFired(ids);
  process.stdout.write(
    `ordered postgres-restart: ${ids.length} jobs in order, duplicates ${duplicates}; down ${secs(upAt - downAt)}; ` +
      `#3 resent ${secs(got[3]!.at - upAt)} after the restart, #4 to #8 within ${secs(got.at(-1)!.at - got[3]!.at)} after it; ` +
      `rechecks fired: ${fired.join(', ') || 'none'}; ${secs(Date.now() - t0)} in all\n`,
  );
});
