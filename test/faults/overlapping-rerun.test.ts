/**
 * Lean delivery (issue 21): two runs of one attempt at once. Worker A's attempt is a local activity
 * inside a workflow task; A freezes (SIGSTOP) with the attempt's POST on the wire, past the workflow
 * task timeout (20 s). Worker B takes the run over and runs the attempt again: it finds the attempt
 * started without an outcome and records it `interrupted`, gives back A's host slot (its lease is no
 * longer renewed), and waits for attempt 2. How soon depends on more than the 20 s: a frozen worker's
 * long polls stay open on the server and can each take the rescheduled task and hold it for another
 * timeout (seen here: the rerun 20-60 s after the freeze). Then A's POST is answered 200 and A thaws
 * (SIGCONT). A's attempt then ends its own way, and each is right: its late 2xx lands over
 * `interrupted` (a 2xx always lands) and attempt 2 finds the job delivered and sends nothing; or its
 * 60 s request deadline had passed in the freeze (a `timeout` recorded over `interrupted`: what really
 * happened to that request); or it learns first that its task is gone and the cancellation stops the
 * POST (nothing recorded). Either way: delivered, at most one duplicate, the attempt rows agree with
 * what the receiver saw, and no host slot or place in line is left held.
 *
 * Real processes: `src/main.ts api` and two `src/main.ts worker`, the run's dev server and Postgres (a
 * database of this file's own), an HTTPS receiver on 127.0.0.1 that holds the first request until told.
 */
import { temporal as temporalProto } from '@temporalio/proto';
import { createTestDb, type TestDb } from '../helpers/db';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { connectDevServer, eventually, markTargetAnswered } from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';
import {
  apiCall,
  alive,
  attemptRowsOf,
  createConfigVia,
  ready,
  serviceEnv,
  spawnService,
  stopAll,
  type Svc,
} from './helpers/procs';

let tdb: TestDb;
let receiver: Receiver;
const svcs: Svc[] = [];
let answerFirst: () => void = () => undefined;
const firstAnswered = new Promise<void>((resolve) => {
  answerFirst = resolve;
});

beforeAll(async () => {
  tdb = await createTestDb();
  let seen = 0;
  receiver = await startReceiver({
    script: () => (++seen === 1 ? { status: 200, gate: firstAnswered } : { status: 200 }),
  });
});

afterAll(async () => {
  answerFirst();
  for (const s of svcs) if (alive(s)) s.proc.kill('SIGCONT');
  await stopAll(svcs);
  await receiver?.close();
  await tdb?.drop();
});

const jobRow = async (id: string) =>
  (
    await tdb.db.query<{ status: string; attempt_count: number }>(
      'SELECT status, attempt_count FROM delivery_jobs WHERE id = $1',
      [id],
    )
  ).rows[0];
const attemptRows = (id: string) => attemptRowsOf(tdb.db, id);

it('a frozen worker’s attempt and its rerun overlap: delivered, at most one duplicate, rows agree with the receiver, no slot left held', async () => {
  const env = serviceEnv({
    databaseUrl: tdb.url,
    temporalAddress: process.env.TEST_TEMPORAL_ADDRESS!,
    // The POST may stay on the wire through the freeze; the rerun's backoff outlasts the thaw.
    extra: {
      DELIVERY_ORDER: 'none',
      DELIVERY_TIMEOUT: '60s',
      RETRY_INITIAL: '15s',
      RETRY_MAX: '30s',
    },
  });
  const api = await spawnService('api', env);
  svcs.push(api);
  await ready(api);
  const a = await spawnService('worker', env);
  svcs.push(a);
  await ready(a);

  const key = env.BOOTSTRAP_API_KEY!;
  // A receiver that answered lately: attempt 1 is a local activity (held inside A's workflow task).
  await markTargetAnswered(tdb.db, receiver.url);
  await createConfigVia(api, key, 'task-overlap', receiver.url);
  const ev = await apiCall(api, key, 'POST', '/v1/tasks/task-overlap/events', {
    streamResponse: { statusUpdate: { taskId: 'task-overlap', status: { state: 'TASK_STATE_WORKING' } } },
  });
  expect(ev.status).toBe(202);
  const jobId = ev.json.deliveries[0].id as string;

  // Attempt 1's POST is on the wire (held by the receiver), sent by A, the only worker: freeze A.
  await receiver.waitFor(1, 60_000);
  a.proc.kill('SIGSTOP');
  const frozenAt = Date.now();
  const b = await spawnService('worker', env);
  svcs.push(b);
  await ready(b);

  // B's rerun of attempt 1 (after A's workflow task timed out) found it started, without an outcome.
  await eventually(
    () => attemptRows(jobId),
    (rows) => rows.length === 1 && rows[0]!.outcome === 'interrupted',
    120_000,
  );
  expect(await jobRow(jobId)).toMatchObject({ status: 'waiting_retry', attempt_count: 1 });
  // A's slot went back with the rerun: A renews nothing while frozen, so its lease was stale.
  const slotsMeanwhile = await tdb.db.query('SELECT holder FROM outbound_slots');
  expect(slotsMeanwhile.rows).toEqual([]);

  // A's POST is answered while A is frozen; then A thaws.
  answerFirst();
  a.proc.kill('SIGCONT');
  const thawedAt = Date.now();
  await eventually(
    () => jobRow(jobId),
    (j) => j?.status === 'delivered',
    60_000,
  );

  const temporal = await connectDevServer();
  let result: { status: string; attempts: number };
  try {
    const handle = temporal.client.workflow.getHandle(makeDeliveryWorkflowId(jobId));
    result = await handle.result();
    expect(result.status).toBe('delivered');
    const events = (await handle.fetchHistory()).events ?? [];
    const timedOut = events.find((e) => e.workflowTaskTimedOutEventAttributes);
    expect(timedOut?.workflowTaskTimedOutEventAttributes?.timeoutType).toBe(
      temporalProto.api.enums.v1.TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE,
    );
  } finally {
    await temporal.close();
  }
  const rows = await attemptRows(jobId);
  const got = receiver.requests.filter((r) => r.headers['x-a2a-push-delivery'] === jobId).length;
  // Every attempt has an outcome (the rerun's `interrupted` replaced by A's own when A ended), they are
  // numbered 1..k, the last one delivered; each row is at most one request, an answered row exactly one.
  expect(rows.map((r) => r.n)).toEqual(rows.map((_, i) => i + 1));
  expect(rows.every((r) => r.outcome !== null)).toBe(true);
  expect(rows.at(-1)).toMatchObject({ outcome: 'delivered', http_status: 200 });
  expect(rows.length).toBeLessThanOrEqual(2);
  expect(got).toBeGreaterThanOrEqual(rows.filter((r) => r.http_status !== null).length);
  expect(got).toBeLessThanOrEqual(rows.length);
  expect(result.attempts).toBe(rows.length);
  const ending =
    rows.length === 1
      ? "A's late 2xx landed over `interrupted`; attempt 2 found the job delivered and sent nothing"
      : `A's attempt 1 ended as ${rows[0]!.outcome}${rows[0]!.error ? ` (${rows[0]!.error})` : ''}; attempt 2 delivered`;
  expect((await tdb.db.query('SELECT holder FROM outbound_slots')).rows).toEqual([]);
  expect((await tdb.db.query('SELECT holder FROM outbound_waiters')).rows).toEqual([]);
  process.stdout.write(
    `overlapping-rerun: A frozen ${Math.round((thawedAt - frozenAt) / 1000)} s, the rerun recorded attempt 1 interrupted meanwhile; then ${ending}; ${got} request(s)\n`,
  );
});
