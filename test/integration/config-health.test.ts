import pino from 'pino';
import { createDeliveryActivities } from '../../src/activities/delivery';
import { createApiKey } from '../../src/db/apikeys';
import { inTx } from '../../src/db/pool';
import { writeEvent } from '../../src/db/outbox';
import { expireWaiting } from '../../src/starts/outbox';
import { DEFAULT_SLOT_SETTINGS, HostSlots } from '../../src/db/slots';
import { compilePolicy, createOutboundClient } from '../../src/outbound';
import { Keyring } from '../../src/sealing/keyring';
import { createTestDb, type TestDb } from '../helpers/db';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { makeTestTls } from '../helpers/tls';

// Config health decided by the delivery activity, with workflow time (`now`) chosen exactly: the
// workflow passes its clock, and these calls stand for attempts days apart.
const DAY = 86_400_000;
let tdb: TestDb;
let receiver: Receiver;
const policy = compilePolicy('127.0.0.0/8', '');
const http = createOutboundClient({ policy, ca: makeTestTls().caPem });

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

const acts = () =>
  createDeliveryActivities({
    db: tdb.db,
    keyring: Keyring.parse(Keyring.generateEntry('k')),
    http,
    policy,
    retry: { initialMs: DAY, factor: 1, maxMs: DAY, maxAttempts: 8 },
    // Long enough that no answer here is slow enough to mark the target for the slow lane.
    timeoutMs: 60_000,
    logger: pino({ level: 'silent' }),
    slots: new HostSlots(tdb.db, { ...DEFAULT_SLOT_SETTINGS, capacity: 8 }),
    wake: async () => undefined,
    due: { leaseMs: () => undefined, take: () => undefined },
    health: { failingAfterMs: 5 * DAY, warnAfterMs: DAY },
  });

async function job(taskId: string): Promise<string> {
  const ev = await inTx(tdb.db, (tx) =>
    writeEvent(tx, {
      tenantId: 't',
      taskId,
      kind: 'task',
      body: '{"task":{}}',
      deadlineMs: 30 * DAY,
      boundPerConfig: 64,
    }),
  );
  return ev.jobs[0]!.id;
}

const config = async (taskId: string) =>
  (await tdb.db.query('SELECT status, status_reason FROM push_configs WHERE task_id = $1', [taskId])).rows[0];

it.each([
  ['a 2xx 1 day before the failure keeps the config active', true, { status: 'active', status_reason: null }],
  [
    'without that 2xx the same failure, 7 days after the first attempt, stops it as failing',
    false,
    { status: 'stopped', status_reason: 'failing' },
  ],
])('%s', async (_name, with2xx, expected) => {
  const a = acts();
  const taskId = `health-${with2xx ? 'reset' : 'stop'}`;
  await tdb.db.query(`INSERT INTO push_configs (tenant_id, task_id, id, url) VALUES ('t', $1, 'c', $2)`, [
    taskId,
    receiver.url,
  ]);
  const t0 = Date.now();
  const answers: number[] = with2xx ? [503, 200, 500] : [503, 503, 500];
  let i = 0;
  receiver.setScript(() => ({ status: answers[i++]! }));
  const first = await job(taskId);
  expect(await a.attemptDelivery({ jobId: first, attempt: 1, now: t0, jitter: 0.5 })).toMatchObject({
    status: 'waiting_retry',
  });
  await a.attemptDelivery({ jobId: first, attempt: 2, now: t0 + 6 * DAY, jitter: 0.5 });
  const second = await job(taskId);
  expect(
    await a.attemptDelivery({ jobId: second, attempt: 1, now: t0 + 7 * DAY, jitter: 0.5 }),
  ).toMatchObject({
    status: 'failed',
  });
  expect(await config(taskId)).toEqual(expected);
});

it('never stops a config early: a 2xx less than CONFIG_FAILING_AFTER before the failure counts, though the health clock moves at most once a minute', async () => {
  const a = acts();
  const taskId = 'health-clock-step';
  await tdb.db.query(`INSERT INTO push_configs (tenant_id, task_id, id, url) VALUES ('t', $1, 'c', $2)`, [
    taskId,
    receiver.url,
  ]);
  const t0 = Date.now();
  const answers = [200, 200, 500, 500];
  let i = 0;
  receiver.setScript(() => ({ status: answers[i++]! }));
  const attempt = async (now: number) =>
    a.attemptDelivery({ jobId: await job(taskId), attempt: 1, now, jitter: 0.5 });
  expect(await attempt(t0)).toMatchObject({ status: 'delivered' });
  // The last 2xx, 30 s after the one that set the clock: the clock stays at t0 (moved once a minute).
  expect(await attempt(t0 + 30_000)).toMatchObject({ status: 'delivered' });
  // 5 days minus 20 s after that last 2xx: not yet failing, whatever the clock says.
  expect(await attempt(t0 + 5 * DAY + 10_000)).toMatchObject({ status: 'failed' });
  expect(await config(taskId)).toEqual({ status: 'active', status_reason: null });
  // 5 days and 31 s after it: failing.
  expect(await attempt(t0 + 5 * DAY + 61_000)).toMatchObject({ status: 'failed' });
  expect(await config(taskId)).toEqual({ status: 'stopped', status_reason: 'failing' });
});

it('the minute the stop allows for is the step by which outbox_attempt_end moves the clock', async () => {
  const def = async (name: string) =>
    (
      await tdb.db.query<{ d: string }>(
        `SELECT string_agg(pg_get_functiondef(oid), E'\\n') AS d FROM pg_proc WHERE proname = $1`,
        [name],
      )
    ).rows[0]!.d;
  expect(await def('outbox_config_delivered')).toContain("health_since < v_now - interval '1 minute'");
  expect(await def('outbox_config_health')).toContain(
    "to_timestamp((p_now_ms - p_failing_after_ms) / 1000.0) - interval '1 minute'",
  );
});

const health = async (taskId: string) =>
  (
    await tdb.db.query<{ failed_jobs: number; warned: boolean }>(
      'SELECT failed_jobs, warned_at IS NOT NULL AS warned FROM push_configs WHERE task_id = $1',
      [taskId],
    )
  ).rows[0];

it('a job is counted once: the rerun of an attempt whose answer was lost, and a look at a job already ended, count nothing more', async () => {
  const a = acts();
  const taskId = 'health-once';
  await tdb.db.query(`INSERT INTO push_configs (tenant_id, task_id, id, url) VALUES ('t', $1, 'c', $2)`, [
    taskId,
    receiver.url,
  ]);
  receiver.setScript(() => ({ status: 500 }));
  const t0 = Date.now();
  const id = await job(taskId);
  expect(await a.attemptDelivery({ jobId: id, attempt: 1, now: t0, jitter: 0.5 })).toMatchObject({
    status: 'failed',
  });
  expect(await health(taskId)).toEqual({ failed_jobs: 1, warned: false });
  // Temporal ran the activity again (its answer lost), twice, the second time 2 days on: the stored
  // row answers, and neither counts the job again nor writes a warning for it.
  for (const now of [t0 + 1_000, t0 + 2 * DAY])
    expect(await a.attemptDelivery({ jobId: id, attempt: 1, now, jitter: 0.5 })).toMatchObject({
      status: 'failed',
    });
  expect(await health(taskId)).toEqual({ failed_jobs: 1, warned: false });
  // A second job that fails 2 days on counts, and warns (the stretch began 2 days ago).
  const next = await job(taskId);
  await a.attemptDelivery({ jobId: next, attempt: 1, now: t0 + 2 * DAY, jitter: 0.5 });
  expect(await health(taskId)).toEqual({ failed_jobs: 2, warned: true });
  const events = await tdb.db.query('SELECT kind FROM config_events WHERE task_id = $1', [taskId]);
  expect(events.rows).toEqual([{ kind: 'failing' }]);
});

it('the sweep counts every job it expires, and expires a due job still queued an hour past its deadline, moving its line on', async () => {
  const taskId = 'health-sweep';
  await tdb.db.query(`INSERT INTO push_configs (tenant_id, task_id, id, url) VALUES ('t', $1, 'c', $2)`, [
    taskId,
    receiver.url,
  ]);
  const write = () =>
    inTx(tdb.db, (tx) =>
      writeEvent(tx, {
        tenantId: 't',
        taskId,
        kind: 'task',
        body: '{"task":{}}',
        deadlineMs: 30 * DAY,
        boundPerConfig: 64,
        ordered: true,
      }),
    ).then((ev) => ev.jobs[0]!.id);
  const ids = [await write(), await write(), await write(), await write()];
  const row = (id: string) =>
    tdb.db
      .query<{ status: string; held: boolean }>(
        'SELECT status, held_by IS NOT NULL AS held FROM delivery_jobs WHERE id = $1',
        [id],
      )
      .then((r) => r.rows[0]);
  expect(await row(ids[0]!)).toEqual({ status: 'queued', held: false });
  // The head, due, is 59 minutes past its deadline (its run may still expire it); the two behind it
  // are past theirs; the last is not.
  await tdb.db.query(`UPDATE delivery_jobs SET deadline = now() - interval '59 minutes' WHERE id = $1`, [
    ids[0],
  ]);
  await tdb.db.query(`UPDATE delivery_jobs SET deadline = now() - interval '1 second' WHERE id = ANY($1)`, [
    ids.slice(1, 3),
  ]);
  const sweep = () => expireWaiting(tdb.db, { failingAfterMs: 5 * DAY, warnAfterMs: DAY }, 60_000);
  const first = await sweep();
  expect(first.due).toEqual([]);
  expect((await Promise.all(ids.map(row))).map((r) => r!.status)).toEqual([
    'queued',
    'expired',
    'expired',
    'queued',
  ]);
  expect(await health(taskId)).toEqual({ failed_jobs: 2, warned: false });
  // An hour and a minute past: no run took the head; the sweep expires it and the last job is due.
  await tdb.db.query(`UPDATE delivery_jobs SET deadline = now() - interval '61 minutes' WHERE id = $1`, [
    ids[0],
  ]);
  const second = await sweep();
  expect(second.due.map((d) => d.id)).toEqual([ids[3]]);
  expect(await row(ids[0]!)).toEqual({ status: 'expired', held: false });
  expect(await row(ids[3]!)).toEqual({ status: 'queued', held: false });
  expect(await health(taskId)).toEqual({ failed_jobs: 3, warned: false });
  // Nothing more to expire: nothing counted.
  await sweep();
  expect(await health(taskId)).toEqual({ failed_jobs: 3, warned: false });
});
