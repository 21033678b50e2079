import pino from 'pino';
import { ApplicationFailure, CancelledFailure } from '@temporalio/activity';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createDeliveryActivities } from '../../src/activities/delivery';
import { createApiKey } from '../../src/db/apikeys';
import { inTx } from '../../src/db/pool';
import { DEFAULT_SLOT_SETTINGS, HostSlots } from '../../src/db/slots';
import { writeEvent } from '../../src/db/outbox';
import { compilePolicy, createOutboundClient } from '../../src/outbound';
import { Keyring } from '../../src/sealing/keyring';
import { createTestDb, type TestDb } from '../helpers/db';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { makeTestTls } from '../helpers/tls';

// The state a worker killed during a POST leaves behind (a started attempt row, the job in flight),
// and what the retried activity makes of it. The kill itself is exercised by the fault suite.
let tdb: TestDb;
let receiver: Receiver;
const policy = compilePolicy('127.0.0.0/8', '');
const http = createOutboundClient({ policy, ca: makeTestTls().caPem });
const retry = { initialMs: 30_000, factor: 3, maxMs: 3_600_000, maxAttempts: 8 };

/** The delivery activities on the test database, with the request timeout a test needs. */
const activities = (timeoutMs: number) =>
  createDeliveryActivities({
    db: tdb.db,
    keyring: Keyring.parse(Keyring.generateEntry('k')),
    http,
    policy,
    retry,
    timeoutMs,
    logger: pino({ level: 'silent' }),
    slots: new HostSlots(tdb.db, { ...DEFAULT_SLOT_SETTINGS, capacity: 8 }),
    wake: async () => undefined,
    due: { leaseMs: () => undefined, take: () => undefined },
    health: { failingAfterMs: 5 * 86_400_000, warnAfterMs: 86_400_000 },
  });

beforeAll(async () => {
  tdb = await createTestDb();
  receiver = await startReceiver();
  await createApiKey(tdb.db, 't');
});
afterAll(async () => {
  await http.close();
  await receiver.close();
  await tdb.drop();
});

it('a started attempt found on retry is marked interrupted, counts, and the next attempt follows after the usual wait', async () => {
  const acts = activities(2_000);
  await tdb.db.query(`INSERT INTO push_configs (tenant_id, task_id, id, url) VALUES ('t', 'task', 'c', $1)`, [
    receiver.url,
  ]);
  const ev = await inTx(tdb.db, (tx) =>
    writeEvent(tx, {
      tenantId: 't',
      taskId: 'task',
      kind: 'task',
      body: '{"task":{}}',
      deadlineMs: 86_400_000,
      boundPerConfig: 64,
    }),
  );
  const jobId = ev.jobs[0]!.id;
  const now = Date.now();
  // As a crash mid-request leaves it:
  await tdb.db.query(`UPDATE delivery_jobs SET status = 'in_flight', attempt_count = 1 WHERE id = $1`, [
    jobId,
  ]);
  await tdb.db.query(
    `INSERT INTO delivery_attempts (job_id, n, started_at) VALUES ($1, 1, to_timestamp($2 / 1000.0))`,
    [jobId, now],
  );
  // The dead worker's slot: its lease was last renewed long enough ago (2 s of 20 s left).
  await tdb.db.query('INSERT INTO outbound_targets (target) VALUES ($1) ON CONFLICT DO NOTHING', [
    `127.0.0.1:${receiver.port}`,
  ]);
  await tdb.db.query(
    `INSERT INTO outbound_slots (target, holder, tenant_id, expires_at) VALUES ($1, $2, 't', now() + interval '2 seconds')`,
    [`127.0.0.1:${receiver.port}`, `${jobId}:1`],
  );

  const r1 = await acts.attemptDelivery({ jobId, attempt: 1, now: now + 20_000, jitter: 0.5 });
  expect(r1).toMatchObject({ status: 'waiting_retry', attempts: 1, outcome: 'interrupted', waitMs: 30_000 });
  expect(receiver.requests).toHaveLength(0);
  const row = await tdb.db.query('SELECT outcome, error FROM delivery_attempts WHERE job_id = $1', [jobId]);
  expect(row.rows).toEqual([{ outcome: 'interrupted', error: 'interrupted' }]);
  // The dead worker's slot went back with it.
  expect((await tdb.db.query('SELECT holder FROM outbound_slots')).rows).toEqual([]);

  // The same activity retried again (its answer lost) answers from the stored row, without a request.
  const again = await acts.attemptDelivery({ jobId, attempt: 1, now: now + 25_000, jitter: 0.5 });
  expect(again).toMatchObject({ status: 'waiting_retry', attempts: 1, waitMs: 25_000 });
  expect(receiver.requests).toHaveLength(0);

  const r2 = await acts.attemptDelivery({ jobId, attempt: 2, now: now + 50_000, jitter: 0.5 });
  expect(r2).toMatchObject({ status: 'delivered', attempts: 2, outcome: 'delivered' });
  expect(receiver.requests).toHaveLength(1);
  expect(receiver.requests[0]!.headers['x-a2a-push-delivery']).toBe(jobId);
});

it("a rerun of an attempt whose first run is alive and on the wire asks again later: one request, one outcome, the slot its first run's", async () => {
  // Temporal retried attempt 1 (its worker alive but silent past the heartbeat timeout) while the
  // first run's request was still on the wire.
  const acts = activities(10_000);
  await tdb.db.query(
    `INSERT INTO push_configs (tenant_id, task_id, id, url) VALUES ('t', 'task2', 'c', $1)`,
    [receiver.url],
  );
  const ev = await inTx(tdb.db, (tx) =>
    writeEvent(tx, {
      tenantId: 't',
      taskId: 'task2',
      kind: 'task',
      body: '{"task":{}}',
      deadlineMs: 86_400_000,
      boundPerConfig: 64,
    }),
  );
  const jobId = ev.jobs[0]!.id;
  const seen = receiver.requests.length;
  let releaseFirst!: () => void;
  const first = new Promise<void>((r) => (releaseFirst = r));
  receiver.setScript((req) => (req.n === seen + 1 ? { status: 503, gate: first } : { status: 200 }));
  const now = Date.now();
  const runA = acts.attemptDelivery({ jobId, attempt: 1, now, jitter: 0.5 });
  await receiver.waitFor(seen + 1, 10_000);

  // The rerun of attempt 1 finds it started without an outcome, its first run's lease fresh: it
  // records nothing, sends nothing, and fails retryably (Temporal asks again after its backoff).
  const rerun = await acts.attemptDelivery({ jobId, attempt: 1, now: now + 20_000, jitter: 0.5 }).then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(rerun).toBeInstanceOf(ApplicationFailure);
  expect(rerun).toMatchObject({ type: 'AttemptOnWire', nonRetryable: false });
  const rows = () =>
    tdb.db
      .query('SELECT n, outcome, http_status FROM delivery_attempts WHERE job_id = $1 ORDER BY n', [jobId])
      .then((r) => r.rows);
  expect(await rows()).toEqual([{ n: 1, outcome: null, http_status: null }]);
  const slots = () =>
    tdb.db
      .query<{ holder: string }>('SELECT holder FROM outbound_slots WHERE holder LIKE $1 ORDER BY holder', [
        `${jobId}:%`,
      ])
      .then((r) => r.rows.map((x) => x.holder));
  expect(await slots()).toEqual([`${jobId}:1`]);
  expect(receiver.requests).toHaveLength(seen + 1);

  // The first request returns (503): its run records it. The rerun asked again answers from the row.
  releaseFirst();
  expect(await runA).toMatchObject({ status: 'waiting_retry', attempts: 1, outcome: 'retry' });
  const again = await acts.attemptDelivery({ jobId, attempt: 1, now: now + 25_000, jitter: 0.5 });
  expect(again).toMatchObject({ status: 'waiting_retry', attempts: 1 });
  expect(again.outcome).toBeUndefined();
  expect(await rows()).toEqual([{ n: 1, outcome: 'retry', http_status: 503 }]);
  expect(await slots()).toEqual([]);

  expect(await acts.attemptDelivery({ jobId, attempt: 2, now: now + 60_000, jitter: 0.5 })).toMatchObject({
    status: 'delivered',
    attempts: 2,
  });
  expect(receiver.requests).toHaveLength(seen + 2);
  // A rerun's `interrupted` never replaces a real outcome.
  await acts.attemptDelivery({ jobId, attempt: 1, now: now + 90_000, jitter: 0.5 });
  expect(await rows()).toEqual([
    { n: 1, outcome: 'retry', http_status: 503 },
    { n: 2, outcome: 'delivered', http_status: 200 },
  ]);
});

it('a cancelled attempt (Temporal cancelled its activity) stops its POST, records nothing and gives its slot back; its rerun finds it interrupted', async () => {
  const acts = activities(30_000);
  await tdb.db.query(
    `INSERT INTO push_configs (tenant_id, task_id, id, url) VALUES ('t', 'task3', 'c', $1)`,
    [receiver.url],
  );
  const ev = await inTx(tdb.db, (tx) =>
    writeEvent(tx, {
      tenantId: 't',
      taskId: 'task3',
      kind: 'task',
      body: '{"task":{}}',
      deadlineMs: 86_400_000,
      boundPerConfig: 64,
    }),
  );
  const jobId = ev.jobs[0]!.id;
  const seen = receiver.requests.length;
  // The target never answers: only the cancellation (or the 30 s timeout) ends the request.
  receiver.setScript(() => ({ hang: true }));
  const activity = new MockActivityEnvironment();
  const now = Date.now();
  const t0 = Date.now();
  const run = activity.run(acts.attemptDelivery, { jobId, attempt: 1, now, jitter: 0.5 });
  await receiver.waitFor(seen + 1, 10_000);
  activity.cancel();
  await expect(run).rejects.toBeInstanceOf(CancelledFailure);
  expect(Date.now() - t0).toBeLessThan(10_000);
  const rows = () =>
    tdb.db.query('SELECT n, outcome FROM delivery_attempts WHERE job_id = $1', [jobId]).then((r) => r.rows);
  expect(await rows()).toEqual([{ n: 1, outcome: null }]);
  expect(
    (await tdb.db.query('SELECT holder FROM outbound_slots WHERE holder LIKE $1', [`${jobId}:%`])).rows,
  ).toEqual([]);
  const rerun = await acts.attemptDelivery({ jobId, attempt: 1, now: now + 20_000, jitter: 0.5 });
  expect(rerun).toMatchObject({ status: 'waiting_retry', attempts: 1, outcome: 'interrupted' });
  expect(await rows()).toEqual([{ n: 1, outcome: 'interrupted' }]);
  receiver.setScript(() => ({ status: 200 }));
});
