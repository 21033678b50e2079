import crypto from 'node:crypto';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { deliveryStatusQuery } from '../../src/workflows/signals';
import {
  attemptCalls,
  connectDevServer,
  createConfig,
  deliveryResult,
  eventually,
  jobRow,
  json,
  markTargetAnswered,
  startStack,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { startTestAgent } from '../helpers/agent';

jest.setTimeout(90_000);

// Host isolation (contract §10) with a bound of 2 calls per target, on the dev server: calls beyond
// the bound wait in line in their workflows (no attempt, no worker slot) and start when a slot frees.
let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let held: Receiver;
let healthy: Receiver;
/** A target with a bound of its own (OUTBOUND_HOST_CONCURRENCY_BY_TARGET), above the default. */
let wide: Receiver;
let release: () => void = () => undefined;
const queue = `isolation-it-${crypto.randomBytes(4).toString('hex')}`;

/**
 * Holds every request to `r` on the wire (a target at its bound) until the returned function is
 * called; for `held`, `release` calls it too.
 */
function holdRequests(r: Receiver = held): () => void {
  let open: () => void = () => undefined;
  const gate = new Promise<void>((res) => (open = res));
  r.setScript(() => ({ status: 200, gate }));
  if (r === held) release = open;
  return open;
}

beforeAll(async () => {
  temporal = await connectDevServer();
  held = await startReceiver();
  healthy = await startReceiver();
  wide = await startReceiver();
  stack = await startStack(temporal, queue, {
    env: {
      OUTBOUND_HOST_CONCURRENCY: '2',
      OUTBOUND_HOST_CONCURRENCY_BY_TARGET: `127.0.0.1:${wide.port}=4`,
      OUTBOX_BOUND_PER_CONFIG: '1',
      RETRY_INITIAL: '1s',
      RETRY_MAX: '2s',
    },
  });
});
afterAll(async () => {
  release();
  await stack?.close();
  await held?.close();
  await healthy?.close();
  await wide?.close();
  await temporal?.close();
});

const waiters = async (port = held.port) =>
  (
    await stack.tdb.db.query<{ holder: string }>(
      'SELECT holder FROM outbound_waiters WHERE target = $1 ORDER BY seq',
      [`127.0.0.1:${port}`],
    )
  ).rows.map((r) => r.holder.split(':')[0]!);

const attemptCount = async (jobId: string) =>
  Number(
    (await stack.tdb.db.query('SELECT count(*) AS n FROM delivery_attempts WHERE job_id = $1', [jobId]))
      .rows[0].n,
  );

async function eventTo(taskId: string, configId: string, url: string): Promise<string> {
  await createConfig(stack, taskId, { id: configId, url });
  return (
    await writeEvent(stack, taskId, { statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } } })
  ).deliveries[0]!.id;
}

describe('host isolation (bound 2, dev server)', () => {
  it('a target with a bound of its own (OUTBOUND_HOST_CONCURRENCY_BY_TARGET) takes that many calls at once, and the next waits', async () => {
    const open = holdRequests(wide);
    const jobs: string[] = [];
    for (let i = 0; i < 5; i++) jobs.push(await eventTo(`iso-wide-${i}`, 'c', wide.url));
    await wide.waitFor(4, 20_000);
    const inLine = await eventually(
      () => waiters(wide.port),
      (w) => w.length === 1,
    );
    expect(wide.requests).toHaveLength(4);
    expect(jobs).toContain(inLine[0]);
    open();
    for (const id of jobs)
      await eventually(
        () => jobRow(stack, id),
        (j) => j.status === 'delivered',
        30_000,
      );
    expect(wide.requests).toHaveLength(5);
  });

  it('calls past the bound wait in line with no attempt used, a healthy target is served meanwhile, and a freed slot starts the next at once', async () => {
    holdRequests();
    const before = held.requests.length;
    const jobs: string[] = [];
    for (let i = 0; i < 4; i++) jobs.push(await eventTo(`iso-a-${i}`, 'c', held.url));
    await held.waitFor(before + 2, 20_000);
    const inLine = await eventually(waiters, (w) => w.length === 2);
    // The two on the wire are the bound; the other two are in line, in the order they came.
    const onWire = held.requests.slice(before).map((r) => r.headers['x-a2a-push-delivery'] as string);
    expect(onWire).toHaveLength(2);
    expect(new Set([...onWire, ...inLine])).toEqual(new Set(jobs));
    for (const id of inLine) {
      expect(await jobRow(stack, id)).toMatchObject({ status: 'queued', attempt_count: 0 });
      expect(await attemptCount(id)).toBe(0);
    }
    // What an operator sees of a waiter: the status query (the Web UI's details say the same).
    // (The row is written before the workflow has the activity's answer: wait for the workflow's view.)
    const st = await eventually(
      () => temporal.client.workflow.getHandle(makeDeliveryWorkflowId(inLine[0]!)).query(deliveryStatusQuery),
      (q) => q.waitingForSlot !== undefined,
    );
    expect(st).toMatchObject({ status: 'queued', attempts: 0, waitingForSlot: `127.0.0.1:${held.port}` });

    // Another target is not held back by the full one.
    const h = await eventTo('iso-healthy', 'c', healthy.url);
    await eventually(
      () => jobRow(stack, h),
      (j) => j.status === 'delivered',
    );
    expect(held.requests.length - before).toBe(2);

    // Free the slots: the waiters are granted them and start, each with its first attempt.
    release();
    for (const id of jobs)
      await eventually(
        () => jobRow(stack, id),
        (j) => j.status === 'delivered',
        30_000,
      );
    for (const id of jobs) expect(await attemptCount(id)).toBe(1);
    expect(held.requests.length - before).toBe(4);
    expect(await waiters()).toEqual([]);
    const slots = await stack.tdb.db.query('SELECT count(*) AS n FROM outbound_slots');
    expect(Number(slots.rows[0].n)).toBe(0);
  });

  it('a waiter whose config is deleted ends cancelled, and one that is superseded ends superseded, both without an attempt', async () => {
    holdRequests();
    const before = held.requests.length;
    const blockers = [await eventTo('iso-b-0', 'c', held.url), await eventTo('iso-b-1', 'c', held.url)];
    await held.waitFor(before + 2, 20_000);
    const doomed = await eventTo('iso-b-del', 'c', held.url);
    const replaced = await eventTo('iso-b-sup', 'c', held.url);
    await eventually(waiters, (w) => w.length === 2);

    const del = await stack.api('/v1/tasks/iso-b-del/pushNotificationConfigs/c', { method: 'DELETE' });
    expect(del.status).toBe(204);
    // A newer event on the same config (bound 1) supersedes the waiting job; the new one takes its place in line.
    const newer = (
      await writeEvent(stack, 'iso-b-sup', {
        statusUpdate: { taskId: 'iso-b-sup', status: { state: 'TASK_STATE_COMPLETED' } },
      })
    ).deliveries[0]!.id;
    const cancelled = await eventually(
      () => json(stack.api(`/v1/deliveries/${doomed}`)),
      (d) => d.status === 'cancelled',
    );
    expect(cancelled).toMatchObject({ reason: 'config_deleted', attempts: [] });
    const superseded = await eventually(
      () => json(stack.api(`/v1/deliveries/${replaced}`)),
      (d) => d.status === 'superseded',
    );
    expect(superseded.attempts).toEqual([]);
    // A job's row ends before its run gives its place in line back: wait for the line itself.
    expect(await eventually(waiters, (w) => w.length === 1 && w[0] === newer)).toEqual([newer]);

    release();
    for (const id of [...blockers, newer])
      await eventually(
        () => jobRow(stack, id),
        (j) => j.status === 'delivered',
        30_000,
      );
    // Nothing of the deleted or superseded job reached the target.
    const seen = held.requests.slice(before).map((r) => r.headers['x-a2a-push-delivery']);
    expect(seen).not.toContain(doomed);
    expect(seen).not.toContain(replaced);
    expect(seen).toHaveLength(3);
  });

  it('agent calls count against their target too: a GetTask to a full target waits (no worker slot) and goes once a slot frees', async () => {
    const agent = await startTestAgent({ transport: 'JSONRPC' });
    try {
      agent.setState('iso-remote', 'TASK_STATE_WORKING');
      const target = `127.0.0.1:${new URL(agent.url).port}`;
      // Two calls of other workers on the wire to the agent's target (their slots, as they hold them).
      await stack.tdb.db.query(`INSERT INTO outbound_targets (target) VALUES ($1) ON CONFLICT DO NOTHING;`, [
        target,
      ]);
      for (const holder of ['other-1', 'other-2'])
        await stack.tdb.db.query(
          `INSERT INTO outbound_slots (target, holder, tenant_id, expires_at) VALUES ($1, $2, 't', now() + interval '1 hour')`,
          [target, holder],
        );
      const res = await stack.api('/v1/registrations', {
        method: 'POST',
        json: { mode: 'separate', remoteTaskId: 'iso-remote', agent: { url: agent.url } },
      });
      expect(res.status).toBe(201);
      const reg = (await res.json()) as { id: string };
      // In line: the registration's call waits for the target.
      await eventually(
        async () =>
          (
            await stack.tdb.db.query('SELECT holder FROM outbound_waiters WHERE target = $1', [target])
          ).rows.map((r) => r.holder),
        (w) => w.includes(`reg:${reg.id}`),
      );
      expect(agent.calls.filter((c) => c.kind !== 'card')).toEqual([]);
      // One of the other calls ends: the freed slot goes to the registration, whose calls then go out.
      await stack.tdb.db.query('SELECT outbound_release($1::jsonb)', [
        {
          target,
          holder: 'other-1',
          capacity: 2,
          grantMs: 120_000,
          waitMs: 900_000,
          suspectMs: 0,
          health: 'neutral',
        },
      ]);
      await eventually(
        async () => agent.calls.filter((c) => c.kind === 'getTask').length,
        (n) => n >= 1,
        20_000,
      );
      expect(
        agent.calls
          .filter((c) => c.kind !== 'card')
          .map((c) => c.kind)
          .slice(0, 2),
      ).toEqual(['createPushConfig', 'getTask']);
    } finally {
      await agent.close();
    }
  });

  it('a target that timed out is served from the slow lane (its own task queue) until a 2xx clears it', async () => {
    const q = `${queue}-lanes`;
    const lanes = await startStack(temporal, q, {
      env: { DELIVERY_TIMEOUT: '4s', RETRY_INITIAL: '1s', RETRY_MAX: '2s' },
    });
    const target = await startReceiver();
    try {
      let n = 0;
      target.setScript(() => (++n === 1 ? { hang: true } : { status: 200 }));
      // It answered lately (its first attempt runs in the fast lane), then it hangs once.
      await markTargetAnswered(lanes.tdb.db, target.url);
      await createConfig(lanes, 'iso-lane', { id: 'c', url: target.url });
      const write = async () =>
        (
          await writeEvent(lanes, 'iso-lane', {
            statusUpdate: { taskId: 'iso-lane', status: { state: 'TASK_STATE_WORKING' } },
          })
        ).deliveries[0]!.id;
      const first = await write();
      await eventually(
        () => jobRow(lanes, first),
        (j) => j.status === 'delivered',
      );
      const queues = async (jobId: string) => {
        // The run's end first: under lean the attempt's marker is recorded after the job row's status.
        await deliveryResult(temporal.client, jobId);
        const history = await temporal.client.workflow
          .getHandle(makeDeliveryWorkflowId(jobId))
          .fetchHistory();
        return attemptCalls(history.events ?? []).map((c) => c.on);
      };
      // The fast lane: a local activity.
      const fast = 'local';
      // Attempt 1 timed out (4 s) in the fast lane; attempt 2 ran in the slow lane and was delivered.
      expect(await queues(first)).toEqual([fast, `${q}-slow`]);
      const mark = await lanes.tdb.db.query('SELECT suspect_until FROM outbound_targets WHERE target = $1', [
        `127.0.0.1:${target.port}`,
      ]);
      expect(mark.rows).toEqual([{ suspect_until: null }]);
      // The 2xx cleared the mark: the next job runs in the fast lane.
      const second = await write();
      await eventually(
        () => jobRow(lanes, second),
        (j) => j.status === 'delivered',
      );
      expect(await queues(second)).toEqual([fast]);
    } finally {
      await lanes.close();
      await target.close();
    }
  });
});
