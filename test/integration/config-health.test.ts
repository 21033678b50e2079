import pino from 'pino';
import { createDeliveryActivities } from '../../src/activities/delivery';
import { createApiKey } from '../../src/db/apikeys';
import { inTx } from '../../src/db/pool';
import { writeEvent } from '../../src/db/outbox';
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
