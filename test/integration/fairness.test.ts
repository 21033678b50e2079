/**
 * Isolation between tenants and tasks (contract section 10, issue 19): the tenant as Temporal's
 * fairness key on every workflow, the dispatcher's claim round robin by tenant, and the cap on a
 * task's configs. Real Postgres, the run's Temporal server (with `matching.enableFairness`), a real
 * HTTPS receiver.
 */
import crypto from 'node:crypto';
import { temporal as proto } from '@temporalio/proto';
import { createApiKey } from '../../src/db/apikeys';
import { writeEvent as writeOutbox } from '../../src/db/outbox';
import { claimDue } from '../../src/starts/outbox';
import { fairnessKeyOf, makeDeliveryWorkflowId, makeRegistrationWorkflowId } from '../../src/ids';
import {
  attemptCalls,
  connectDevServer,
  createConfig,
  eventually,
  jobRow,
  startStack,
  type Json,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

jest.setTimeout(120_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let receiver: Receiver;
const queue = `fairness-it-${crypto.randomBytes(4).toString('hex')}`;
const status = (taskId: string) => ({ statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } } });
/** A tenant id of the longest kind (128 characters, 128 UTF-8 bytes): over Temporal's 64-byte key limit. */
const LONG_TENANT = `long-tenant-${'x'.repeat(116)}`;

beforeAll(async () => {
  temporal = await connectDevServer();
  receiver = await startReceiver();
  // No sweep: whatever starts a job here is the path under test.
  stack = await startStack(temporal, queue, { env: { SWEEP_INTERVAL: '1h' } });
});
/** Closed after each test: what a test opened for itself. */
const afterThis: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of afterThis.splice(0)) await close();
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
  await temporal?.close();
});

/** fetch against the API as another tenant. */
const apiAs = (key: string, path: string, init: RequestInit & { json?: unknown } = {}) =>
  stack.api(path, {
    ...init,
    headers: { authorization: `Bearer ${key}`, ...(init.json ? { 'content-type': 'application/json' } : {}) },
    ...(init.json ? { body: JSON.stringify(init.json) } : {}),
  });

describe('fairness key', () => {
  it('is the tenant id itself up to 64 bytes, else a stable sha256 of it that fits', () => {
    expect(fairnessKeyOf('tenant-a')).toBe('tenant-a');
    const at64 = 'a'.repeat(64);
    expect(fairnessKeyOf(at64)).toBe(at64);
    // 64 characters but 65 bytes: the limit counts UTF-8 bytes.
    const multiByte = `é${'a'.repeat(63)}`;
    expect(fairnessKeyOf(multiByte)).toMatch(/^sha256:[A-Za-z0-9_-]{43}$/);
    const long = fairnessKeyOf(LONG_TENANT);
    expect(long).toMatch(/^sha256:[A-Za-z0-9_-]{43}$/);
    expect(Buffer.byteLength(long)).toBeLessThanOrEqual(64);
    expect(fairnessKeyOf(LONG_TENANT)).toBe(long);
    expect(fairnessKeyOf(`${LONG_TENANT.slice(0, -1)}y`)).not.toBe(long);
    expect(long).toBe(`sha256:${crypto.createHash('sha256').update(LONG_TENANT).digest('base64url')}`);
  });

  it.each([
    ['a short tenant id', 'tenant-a'],
    ['a 128-character tenant id', LONG_TENANT],
  ])(
    'a delivery workflow of %s carries its fairness key; its activity sets none (so inherits it)',
    async (_, tenant) => {
      const { key } =
        tenant === 'tenant-a' ? { key: stack.apiKey } : await createApiKey(stack.tdb.db, tenant);
      const taskId = `fk-${crypto.randomUUID()}`;
      // A receiver of its own, never answered before: the first attempt is a first contact, which runs
      // in the slow lane, as an activity task under both delivery workflow types (the lean type's fast
      // lane is a local activity, which no task queue dispatches).
      const own = await startReceiver();
      afterThis.push(() => own.close());
      const created = await apiAs(key, `/v1/tasks/${taskId}/pushNotificationConfigs`, {
        method: 'POST',
        json: { id: 'c1', url: own.url },
      });
      expect(created.status).toBe(201);
      const w = await apiAs(key, `/v1/tasks/${taskId}/events`, {
        method: 'POST',
        json: { streamResponse: status(taskId) },
      });
      expect(w.status).toBe(202);
      const [delivery] = ((await w.json()) as Json).deliveries as Array<{ id: string }>;
      await eventually(
        async () => (await jobRow(stack, delivery!.id)).status,
        (s) => s === 'delivered',
      );
      const handle = temporal.client.workflow.getHandle(makeDeliveryWorkflowId(delivery!.id));
      const d = await handle.describe();
      expect(d.priority?.fairnessKey).toBe(fairnessKeyOf(tenant));
      expect(Buffer.byteLength(d.priority!.fairnessKey!)).toBeLessThanOrEqual(64);
      // The activity's own options set no priority: the server dispatches it with the workflow's
      // (its ActivityTaskScheduled event records what the command carried, which is nothing).
      const history = await handle.fetchHistory();
      const scheduled = history.events!.filter(
        (e) => e.eventType === proto.api.enums.v1.EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
      );
      expect(attemptCalls(history.events!)).toEqual([
        { on: `${queue}-slow`, summary: 'attempt 1 (slow lane)' },
      ]);
      expect(scheduled.length).toBeGreaterThan(0);
      for (const e of scheduled)
        expect(e.activityTaskScheduledEventAttributes?.priority?.fairnessKey ?? '').toBe('');
    },
  );

  it('a registration workflow carries its tenant fairness key', async () => {
    const res = await stack.api('/v1/registrations', {
      method: 'POST',
      json: { mode: 'embedded', agent: { url: 'https://127.0.0.1:9' } },
    });
    expect(res.status).toBe(201);
    const reg = (await res.json()) as Json;
    await eventually(
      async () =>
        (await stack.tdb.db.query('SELECT workflow_started FROM registrations WHERE id = $1', [reg.id]))
          .rows[0].workflow_started as boolean,
      (v) => v,
    );
    const d = await temporal.client.workflow.getHandle(makeRegistrationWorkflowId(reg.id)).describe();
    expect(d.priority?.fairnessKey).toBe('tenant-a');
    expect((await stack.api(`/v1/registrations/${reg.id}`, { method: 'DELETE' })).status).toBe(204);
  });
});

describe('dispatch round robin by tenant', () => {
  it("one claim takes tenant B's few jobs beside tenant A's backlog, each tenant's in commit order", async () => {
    const b = await createApiKey(stack.tdb.db, 'tenant-b');
    const taskA = `rr-a-${crypto.randomUUID()}`;
    const taskB = `rr-b-${crypto.randomUUID()}`;
    await createConfig(stack, taskA, { id: 'c1', url: receiver.url });
    expect(
      (
        await apiAs(b.key, `/v1/tasks/${taskB}/pushNotificationConfigs`, {
          method: 'POST',
          json: { id: 'c1', url: receiver.url },
        })
      ).status,
    ).toBe(201);
    // Written straight to the outbox, 300 of A, then 3 of B, leased for a minute to nobody (so that
    // neither the stack's relay nor its NOTIFY takes them), then the leases gone at once.
    const write = (tenantId: string, taskId: string) =>
      writeOutbox(stack.tdb.db, {
        tenantId,
        taskId,
        kind: 'statusUpdate',
        body: JSON.stringify(status(taskId)),
        deadlineMs: 600_000,
        boundPerConfig: 1000,
        leaseMs: 60_000,
      });
    const aJobs: string[] = [];
    for (let i = 0; i < 300; i++) aJobs.push((await write('tenant-a', taskA)).jobs[0]!.id);
    const bJobs: string[] = [];
    for (let i = 0; i < 3; i++) bJobs.push((await write('tenant-b', taskB)).jobs[0]!.id);
    await stack.tdb.db.query('UPDATE delivery_jobs SET dispatch_lease = NULL WHERE id = ANY($1::uuid[])', [
      [...aJobs, ...bJobs],
    ]);
    const claimed = await claimDue(stack.tdb.db, 10, 60_000);
    // Round robin: A1 B1 A2 B2 A3 B3 A4 A5 A6 A7: all of B's, and A's seven oldest, in that order.
    expect(claimed.map((j) => j.id)).toEqual([
      aJobs[0],
      bJobs[0],
      aJobs[1],
      bJobs[1],
      aJobs[2],
      bJobs[2],
      ...aJobs.slice(3, 7),
    ]);
    // A's backlog is not this file's load: it goes before the relay could start it; the claimed jobs go
    // back to the stack's relay, which starts them.
    await stack.tdb.db.query('DELETE FROM delivery_jobs WHERE id = ANY($1::uuid[])', [aJobs.slice(7)]);
    await stack.tdb.db.query('UPDATE delivery_jobs SET dispatch_lease = NULL WHERE id = ANY($1::uuid[])', [
      claimed.map((j) => j.id),
    ]);
    stack.relay.kick();
    for (const id of [...bJobs, ...aJobs.slice(0, 7)])
      await eventually(
        async () => (await jobRow(stack, id)).status,
        (s) => s === 'delivered',
      );
  });
});

describe('configs per task (MAX_CONFIGS_PER_TASK, default 100)', () => {
  const create = (taskId: string, id: string) =>
    stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs`, {
      method: 'POST',
      json: { id, url: 'https://127.0.0.1:9/hook' },
    });

  it('the 101st config is 409 conflict naming the limit, also when created concurrently; deleted ones do not count', async () => {
    const taskId = `cap-${crypto.randomUUID()}`;
    for (let i = 0; i < 95; i++) expect((await create(taskId, `c${i}`)).status).toBe(201);
    // Paused and stopped configs count: only deletion frees a place.
    await stack.tdb.db.query(
      `UPDATE push_configs SET status = CASE WHEN id = 'c0' THEN 'auth_failed' ELSE 'stopped' END
        WHERE task_id = $1 AND id IN ('c0', 'c1')`,
      [taskId],
    );
    // 20 at once for the last 5 places: exactly 5 are created.
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => create(taskId, `p${i}`)));
    const statuses = answers.map((r) => r.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(5);
    expect(statuses.filter((s) => s === 409)).toHaveLength(15);
    const refused = (await answers.find((r) => r.status === 409)!.json()) as Json;
    expect(refused).toMatchObject({ type: 'urn:a2a-push:problem:conflict', status: 409 });
    expect(refused.detail).toContain('a task has at most 100 push configs (MAX_CONFIGS_PER_TASK)');
    const live = async () =>
      Number(
        (
          await stack.tdb.db.query(
            'SELECT count(*) AS n FROM push_configs WHERE task_id = $1 AND deleted_at IS NULL',
            [taskId],
          )
        ).rows[0].n,
      );
    expect(await live()).toBe(100);

    const extra = await create(taskId, 'one-more');
    expect(extra.status).toBe(409);
    expect(((await extra.json()) as Json).detail).toMatch(
      /at most 100 push configs \(MAX_CONFIGS_PER_TASK\)/,
    );
    // Another task of the same tenant is not affected.
    expect((await create(`${taskId}-other`, 'c0')).status).toBe(201);

    expect(
      (await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs/c5`, { method: 'DELETE' })).status,
    ).toBe(204);
    expect((await create(taskId, 'one-more')).status).toBe(201);
    expect(await live()).toBe(100);
    expect((await create(taskId, 'yet-another')).status).toBe(409);
  });
});
