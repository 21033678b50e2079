/**
 * Worker killed (SIGKILL) in the middle of a POST and during a backoff wait, twice. After a new worker
 * starts, every job ends in a final status; the receiver saw each event at least once and at most one
 * duplicate per kill; the attempt rows agree with what the receiver saw.
 *
 * Real processes: `src/main.ts api` and `src/main.ts worker` as children, the run's dev server and
 * Postgres, a scripted HTTPS receiver on 127.0.0.1. The delivery workflow's fast-lane attempt is a
 * local activity inside a workflow task: a dead worker is noticed by the workflow task's timeout (20 s).
 */
import { createTestDb, type TestDb } from '../helpers/db';
import { temporal as temporalProto } from '@temporalio/proto';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { connectDevServer, eventually, markTargetAnswered } from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';
import {
  createConfigVia,
  killHard,
  ready,
  serviceEnv,
  spawnService,
  stopAll,
  type Svc,
  writeEventVia,
} from './helpers/procs';

describe('the delivery workflow', () => {
  const kind = 'lean';
  let tdb: TestDb;
  let receiver: Receiver;
  let env: Record<string, string>;
  let api: Svc;
  const svcs: Svc[] = [];
  const seen = new Map<string, number>();

  const deliveryOf = (r: { headers: Record<string, string | string[] | undefined> }) =>
    String(r.headers['x-a2a-push-delivery']);

  beforeAll(async () => {
    tdb = await createTestDb();
    // First request of a job: /hang never answers (the worker dies with it on the wire), /retry is
    // answered 503 (the job waits); every later request is answered 200.
    receiver = await startReceiver({
      script: (req) => {
        const id = deliveryOf(req);
        const n = (seen.get(id) ?? 0) + 1;
        seen.set(id, n);
        if (n === 1 && req.path === '/hang') return { hang: true };
        if (n === 1 && req.path === '/retry') return { status: 503 };
        return { status: 200 };
      },
    });
    env = serviceEnv({
      databaseUrl: tdb.url,
      temporalAddress: process.env.TEST_TEMPORAL_ADDRESS!,
      // The backoff after the first 503 is 8-12 s: long enough to kill the worker inside it.
      // Four jobs of one config on the wire at once: each job's own durability through a kill is what
      // this tests, so without the per-config order (faults/ordered-delivery.test.ts keeps order).
      extra: { RETRY_INITIAL: '10s', RETRY_MAX: '20s', DELIVERY_ORDER: 'none' },
    });
    api = await spawnService('api', env);
    svcs.push(api);
    await ready(api);
    // A receiver that answered lately: the attempts killed here run in the fast lane (lean: as local
    // activities).
    await markTargetAnswered(tdb.db, receiver.url);
  });

  afterAll(async () => {
    await stopAll(svcs);
    await receiver?.close();
    await tdb?.drop();
  });

  const key = () => env.BOOTSTRAP_API_KEY!;
  const base = () => receiver.url.replace(/\/hook$/, '');

  const config = (taskId: string, p: string) => createConfigVia(api, key(), taskId, `${base()}${p}`);

  async function events(taskId: string, count: number): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < count; i++) {
      ids.push(await writeEventVia(api, key(), taskId, { i }));
    }
    return ids;
  }

  const statusOf = async (ids: string[]) =>
    (
      await tdb.db.query<{ id: string; status: string }>(
        'SELECT id, status FROM delivery_jobs WHERE id = ANY($1::uuid[])',
        [ids],
      )
    ).rows;

  const requestsFor = (id: string) => receiver.requests.filter((r) => deliveryOf(r) === id);

  it(`SIGKILL mid-POST and during a backoff wait: a new worker finishes every job, at most one duplicate per kill`, async () => {
    const t0 = Date.now();
    let worker = await spawnService('worker', env);
    svcs.push(worker);
    await ready(worker);

    await config('task-hang', '/hang');
    await config('task-retry', '/retry');
    await config('task-hang2', '/hang');
    const hang = await events('task-hang', 4);
    const retry = await events('task-retry', 4);

    // Kill 1: four POSTs on the wire, four jobs in their backoff wait.
    await eventually(
      async () => ({
        onWire: hang.filter((id) => requestsFor(id).length === 1).length,
        waiting: (await statusOf(retry)).filter((j) => j.status === 'waiting_retry').length,
      }),
      (v) => v.onWire === 4 && v.waiting === 4,
      120_000,
    );
    await killHard(worker);
    const kills: Array<{ at: number; inFlight: string[] }> = [{ at: Date.now(), inFlight: hang }];

    worker = await spawnService('worker', env);
    svcs.push(worker);
    await ready(worker);

    // Kill 2, on the second worker: three more POSTs on the wire.
    const hang2 = await events('task-hang2', 3);
    await eventually(
      async () => hang2.filter((id) => requestsFor(id).length === 1).length,
      (n) => n === 3,
      120_000,
    );
    await killHard(worker);
    kills.push({ at: Date.now(), inFlight: hang2 });

    worker = await spawnService('worker', env);
    svcs.push(worker);
    await ready(worker);

    const all = [...hang, ...retry, ...hang2];
    const final = await eventually(
      () => statusOf(all),
      (rows) => rows.length === all.length && rows.every((r) => r.status === 'delivered'),
      240_000,
    );
    expect(final).toHaveLength(11);

    const attempts = await tdb.db.query<{
      job_id: string;
      n: number;
      outcome: string | null;
      http_status: number | null;
    }>(
      'SELECT job_id, n, outcome, http_status FROM delivery_attempts WHERE job_id = ANY($1::uuid[]) ORDER BY job_id, n',
      [all],
    );
    let duplicates = 0;
    for (const id of all) {
      const rows = attempts.rows.filter((a) => a.job_id === id);
      const got = requestsFor(id);
      // Each event at least once, each time with its own body.
      expect(got.length).toBeGreaterThanOrEqual(1);
      expect(new Set(got.map((r) => r.body.toString())).size).toBe(1);
      // Attempt rows are numbered 1..k, every one with an outcome, the last one delivered with 200.
      expect(rows.map((r) => r.n)).toEqual(rows.map((_, i) => i + 1));
      expect(rows.every((r) => r.outcome !== null)).toBe(true);
      expect(rows.at(-1)).toMatchObject({ outcome: 'delivered', http_status: 200 });
      expect(rows.length).toBeLessThanOrEqual(8);
      // What the receiver saw agrees with the rows: every answered attempt is one request; an interrupted
      // attempt is at most one request the worker never heard back from.
      const answered = rows.filter((r) => r.http_status !== null).length;
      const interrupted = rows.filter((r) => r.outcome === 'interrupted').length;
      expect(got.length).toBeGreaterThanOrEqual(answered);
      expect(got.length).toBeLessThanOrEqual(answered + interrupted);
      const dup = got.length - answered;
      expect(dup).toBeLessThanOrEqual(kills.length);
      duplicates += dup;
    }
    // The POSTs on the wire at a kill became interrupted attempts, then one more POST delivered them.
    for (const id of [...hang, ...hang2]) {
      const rows = attempts.rows.filter((a) => a.job_id === id);
      expect(rows.slice(0, 2)).toEqual([
        expect.objectContaining({ n: 1, outcome: 'interrupted', http_status: null }),
        expect.objectContaining({ n: 2, outcome: 'delivered', http_status: 200 }),
      ]);
    }
    // The jobs waiting at the kill had their timer fire with no worker; the next worker made attempt 2.
    for (const id of retry) {
      const rows = attempts.rows.filter((a) => a.job_id === id);
      expect(rows).toEqual([
        expect.objectContaining({ n: 1, outcome: 'retry', http_status: 503 }),
        expect.objectContaining({ n: 2, outcome: 'delivered', http_status: 200 }),
      ]);
      expect(requestsFor(id)).toHaveLength(2);
    }
    // Only the POSTs on the wire at a kill were seen twice.
    expect(duplicates).toBe(hang.length + hang2.length);

    // The dead worker's attempt ran again after 20 s, not after the attempt's 2-minute start-to-close
    // timeout: the workflow task that ran it as a local activity timed out and a new worker took the run.
    const temporal = await connectDevServer();
    try {
      const h = await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(hang[0]!)).fetchHistory();
      const events = h.events ?? [];
      const timedOut = events.find((e) => e.workflowTaskTimedOutEventAttributes);
      expect(timedOut?.workflowTaskTimedOutEventAttributes?.timeoutType).toBe(
        temporalProto.api.enums.v1.TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE,
      );
      expect(events.some((e) => e.activityTaskScheduledEventAttributes)).toBe(false);
      // Attempts 1 (found interrupted by the new worker's rerun) and 2 (delivered) are local activities.
      expect(
        events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity').length,
      ).toBeGreaterThanOrEqual(2);
    } finally {
      await temporal.close();
    }
    process.stdout.write(
      `worker-kill (${kind}): kills survived ${kills.length}, jobs ${all.length}, duplicates seen ${duplicates}, ` +
        `${Math.round((Date.now() - t0) / 1000)} s\n`,
    );
  });
});
