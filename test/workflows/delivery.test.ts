import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { deliveryStatusQuery } from '../../src/workflows/signals';
import {
  attemptRows,
  configRow,
  createConfig,
  createTimeSkippingEnv,
  deliveryResult,
  eventually,
  jobRow,
  json,
  markTargetAnswered,
  startStack,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver, type ScriptedAnswer } from '../helpers/receiver';
import type { Resolver } from '../../src/outbound';

jest.setTimeout(120_000);

// A fresh time-skipping server per test: skipped time accumulates on a server, and job deadlines are
// written in real time (as the API writes them), so each test starts with the server's clock at now.
let env: TestWorkflowEnvironment;
beforeEach(async () => {
  env = await createTimeSkippingEnv();
});

let queue = 0;
let stack: Stack | undefined;
let receiver: Receiver | undefined;
afterEach(async () => {
  await stack?.close();
  await receiver?.close();
  await env?.teardown();
  stack = undefined;
  receiver = undefined;
});

const result = (jobId: string) => deliveryResult(env.client, jobId);

/**
 * Waits for a job's workflow to close while the server's clock stands still (describe, unlike result,
 * does not let the time-skipping server skip time): a job a wake ends, ends without waiting out its
 * backoff. It also keeps the wake from racing the backoff timer, which the time-skipping server does
 * not survive: it refuses the woken workflow task's CancelTimer ("invalid history builder state for
 * action") and the run hangs; a real server makes the worker retry the task with the timer's event.
 */
async function closedWhileTimeStands(jobId: string): Promise<void> {
  await eventually(
    () => env.client.workflow.getHandle(makeDeliveryWorkflowId(jobId)).describe(),
    (d) => d.status.name !== 'RUNNING',
  );
}

async function scenario(
  script: ScriptedAnswer[] | ((n: number) => ScriptedAnswer),
  o: {
    env?: Record<string, string>;
    apiEnv?: Record<string, string>;
    config?: Record<string, unknown>;
    resolver?: Resolver;
  } = {},
) {
  receiver = await startReceiver({
    script: (req) => (typeof script === 'function' ? script(req.n) : (script[req.n - 1] ?? { status: 200 })),
  });
  stack = await startStack(env, `delivery-${++queue}`, {
    env: o.env ?? {},
    ...(o.apiEnv ? { apiEnv: o.apiEnv } : {}),
    ...(o.resolver ? { resolver: o.resolver } : {}),
  });
  // A receiver that answered lately: the first attempt runs in the fast lane, as for any known target
  // (a first contact goes to the slow lane: test/integration/lean.test.ts, the slow-lane tests).
  await markTargetAnswered(stack.tdb.db, o.config?.url ? String(o.config.url) : receiver.url);
  const taskId = `task-${queue}`;
  const config = await createConfig(stack, taskId, {
    id: 'cfg',
    url: receiver.url,
    authentication: { scheme: 'Bearer', credentials: 'push-secret-1' },
    token: 'never-a-header',
    ...o.config,
  });
  const ev = await writeEvent(stack, taskId, {
    statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } },
  });
  const jobId = ev.deliveries[0]!.id;
  const r = await result(jobId);
  return {
    taskId,
    config,
    jobId,
    result: r,
    job: await jobRow(stack, jobId),
    cfg: await configRow(stack, taskId, 'cfg'),
    attempts: await attemptRows(stack, jobId),
  };
}

/** Waits between consecutive attempts, read from the attempt rows (workflow time). */
const gaps = (rows: Array<{ started_at: Date }>) =>
  rows.slice(1).map((r, i) => r.started_at.getTime() - rows[i]!.started_at.getTime());

/** Asserts a wait is inside the ±20 % jitter band around base (plus a little for the activity's own run). */
const expectInBand = (gap: number, base: number) => {
  expect(gap).toBeGreaterThanOrEqual(base * 0.8);
  expect(gap).toBeLessThanOrEqual(base * 1.2 + 2_000);
};

describe('delivery workflow (time-skipping)', () => {
  it('503, 503, 200 retries twice with backoff and is delivered', async () => {
    const s = await scenario([{ status: 503 }, { status: 503 }, { status: 200 }]);
    expect(s.result.status).toBe('delivered');
    expect(s.job.status).toBe('delivered');
    expect(s.cfg.status).toBe('active');
    expect(receiver!.requests).toHaveLength(3);
    expect(s.attempts.map((a) => a.outcome)).toEqual(['retry', 'retry', 'delivered']);
    const [g1, g2] = gaps(s.attempts);
    expectInBand(g1!, 30_000);
    expectInBand(g2!, 90_000);
    // What an operator reads in the Web UI: attempt (activity or marker) and timer summaries, the static summary, the query.
    const handle = env.client.workflow.getHandle(makeDeliveryWorkflowId(s.jobId));
    const events = (await handle.fetchHistory()).events ?? [];
    const summaries = events
      .filter(
        (e) =>
          e.activityTaskScheduledEventAttributes ||
          e.timerStartedEventAttributes ||
          // The lean type (the default): each fast-lane attempt is a local activity, one marker.
          e.markerRecordedEventAttributes?.markerName === 'core_local_activity',
      )
      .map((e) =>
        e.userMetadata?.summary?.data
          ? JSON.parse(Buffer.from(e.userMetadata.summary.data).toString())
          : undefined,
      );
    expect(summaries[0]).toBe('attempt 1');
    expect(summaries[1]).toMatch(/^attempt 1 of 8 \(http_503\), waiting \d+ s$/);
    expect(summaries[2]).toBe('attempt 2 of 8');
    expect(summaries[4]).toBe('attempt 3 of 8');
    const started = events.find((e) => e.workflowExecutionStartedEventAttributes);
    expect(Buffer.from(started!.userMetadata!.summary!.data!).toString()).toContain(
      `push task ${s.taskId} → host 127.0.0.1:`,
    );
    expect(Buffer.from(started!.userMetadata!.details!.data!).toString()).toContain(
      'up to 8 attempts of at most 15 s each',
    );
    expect(await handle.query(deliveryStatusQuery)).toMatchObject({ status: 'delivered', attempts: 3 });
  });

  it('429 with Retry-After: 120 waits at least 120 s, then delivers', async () => {
    const s = await scenario([{ status: 429, headers: { 'retry-after': '120' } }, { status: 200 }]);
    expect(s.result.status).toBe('delivered');
    expect(receiver!.requests).toHaveLength(2);
    const [g] = gaps(s.attempts);
    expect(g!).toBeGreaterThanOrEqual(120_000);
    expect(g!).toBeLessThan(125_000);
    const d = await json(stack!.api(`/v1/deliveries/${s.jobId}`));
    expect(d.attempts[0]).toMatchObject({ n: 1, outcome: 'retry', httpStatus: 429, retryAfterMs: 120_000 });
  });

  it('a 401 pauses the config as auth_failed after one request', async () => {
    const s = await scenario([{ status: 401 }]);
    expect(s.job).toMatchObject({ status: 'auth_failed', reason: 'http_401' });
    expect(s.cfg).toEqual({ status: 'auth_failed', status_reason: 'http_401' });
    expect(receiver!.requests).toHaveLength(1);
  });

  it('a 403 pauses the config as auth_failed', async () => {
    const s = await scenario([{ status: 403 }]);
    expect(s.cfg).toEqual({ status: 'auth_failed', status_reason: 'http_403' });
  });

  it('a 410 stops the config and starts no further attempt', async () => {
    const s = await scenario([{ status: 410 }]);
    expect(s.job).toMatchObject({ status: 'stopped', reason: 'http_410' });
    expect(s.cfg).toEqual({ status: 'stopped', status_reason: 'http_410' });
    expect(receiver!.requests).toHaveLength(1);
    // A stopped config receives no new jobs.
    const ev = await writeEvent(stack!, s.taskId, { task: { id: s.taskId } });
    expect(ev.deliveries).toEqual([]);
  });

  it('a 404 stops the config', async () => {
    const s = await scenario([{ status: 404 }]);
    expect(s.cfg).toEqual({ status: 'stopped', status_reason: 'http_404' });
  });

  it('a 302 is a failed attempt and is never followed', async () => {
    const target = await startReceiver();
    try {
      const s = await scenario([{ status: 302, headers: { location: target.url } }]);
      expect(s.job).toMatchObject({ status: 'failed', reason: 'redirect' });
      expect(s.cfg.status).toBe('active');
      expect(receiver!.requests).toHaveLength(1);
      expect(target.requests).toHaveLength(0);
      expect(target.connections).toBe(0);
    } finally {
      await target.close();
    }
  });

  it('a 500 fails the job and leaves the config active', async () => {
    const s = await scenario([{ status: 500 }]);
    expect(s.job).toMatchObject({ status: 'failed', reason: 'http_500' });
    expect(s.cfg.status).toBe('active');
    expect(receiver!.requests).toHaveLength(1);
  });

  it('timeouts on every attempt exhaust the job after 8 attempts, spaced by the schedule', async () => {
    const s = await scenario(() => ({ hang: true }), { env: { DELIVERY_TIMEOUT: '300ms' } });
    expect(s.job).toMatchObject({ status: 'exhausted', reason: 'timeout', attempt_count: 8 });
    expect(receiver!.requests).toHaveLength(8);
    expect(s.attempts.every((a) => a.outcome === 'retry' && a.error === 'timeout')).toBe(true);
    const bases = [30, 90, 270, 810, 2430, 7290, 21600].map((x) => x * 1000);
    gaps(s.attempts).forEach((g, i) => expectInBand(g, bases[i]!));
  });

  it('a wait that would pass the deadline ends the job expired', async () => {
    const s = await scenario(() => ({ status: 503 }), { env: { DELIVERY_DEADLINE: '700s' } });
    // Attempt 4 starts by 36 + 108 + 324 = 468 s whatever the jitter; the wait after it (810 s ± 20 %,
    // at least 648 s) would end past 700 s for every jitter, so the job expires after exactly 4 requests.
    expect(s.job).toMatchObject({ status: 'expired', reason: 'http_503' });
    expect(receiver!.requests).toHaveLength(4);
  });

  it('a TLS error (certificate not valid for the name) fails the job and leaves the config active', async () => {
    // wrong-name.test resolves to the receiver, whose certificate does not name it.
    const port = () => new URL(receiver!.url).port;
    let url = '';
    const s = await scenario([{ status: 200 }], {
      resolver: async () => [{ address: '127.0.0.1', family: 4 }],
      get config() {
        url = `https://wrong-name.test:${port()}/hook`;
        return { url };
      },
    });
    expect(url).toContain('wrong-name.test');
    expect(s.job).toMatchObject({ status: 'failed', reason: 'tls' });
    expect(s.cfg.status).toBe('active');
    expect(s.attempts.map((a) => [a.outcome, a.error])).toEqual([['failed', 'tls']]);
    expect(receiver!.requests).toHaveLength(0);
  });

  it('connection refused is retried', async () => {
    const closed = await startReceiver();
    const url = closed.url;
    await closed.close();
    let calls = 0;
    const s = await scenario(() => ({ status: 200 }), {
      config: { url },
      env: { DELIVERY_MAX_ATTEMPTS: '2' },
    });
    calls = s.attempts.length;
    expect(s.job).toMatchObject({ status: 'exhausted', reason: 'connection' });
    expect(calls).toBe(2);
  });

  it('a guard refusal at attempt time stops the config and makes no connection', async () => {
    const s = await scenario([{ status: 200 }], {
      env: { OUTBOUND_DENY_CIDRS: '127.0.0.1/32' },
      apiEnv: { OUTBOUND_DENY_CIDRS: '' },
    });
    expect(s.job).toMatchObject({ status: 'stopped', reason: 'guard_refused:denied_cidr' });
    expect(s.cfg).toEqual({ status: 'stopped', status_reason: 'guard_refused:denied_cidr' });
    expect(s.attempts.map((a) => a.outcome)).toEqual(['guard_refused']);
    expect(receiver!.connections).toBe(0);
  });

  it('sends the contract headers: a2a+json, Bearer, delivery id; never the token', async () => {
    const s = await scenario([{ status: 200 }]);
    const h = receiver!.requests[0]!.headers;
    expect(h['content-type']).toBe('application/a2a+json');
    expect(h.authorization).toBe('Bearer push-secret-1');
    expect(h['x-a2a-push-delivery']).toBe(s.jobId);
    expect(h['a2a-version']).toBe('1.0');
    expect(h['user-agent']).toMatch(/^a2a-push\//);
    expect(h['x-a2a-notification-token']).toBeUndefined();
    expect(JSON.stringify(h)).not.toContain('never-a-header');
  });
});

describe('bounds, deletion and supersession (time-skipping)', () => {
  it('over the per-config bound, the oldest waiting job is superseded and ends at once', async () => {
    receiver = await startReceiver({ script: () => ({ status: 503 }) });
    stack = await startStack(env, `delivery-${++queue}`, { env: { OUTBOX_BOUND_PER_CONFIG: '2' } });
    const taskId = `task-${queue}`;
    await createConfig(stack, taskId, { id: 'cfg', url: receiver.url });
    const first = await writeEvent(stack, taskId, { task: { id: taskId, n: 1 } });
    await receiver.waitFor(1);
    await writeEvent(stack, taskId, { task: { id: taskId, n: 2 } });
    await writeEvent(stack, taskId, { task: { id: taskId, n: 3 } });
    await closedWhileTimeStands(first.deliveries[0]!.id);
    const r = await result(first.deliveries[0]!.id);
    expect(r.status).toBe('superseded');
    const unfinished = await stack.tdb.db.query(
      `SELECT count(*)::int AS n FROM delivery_jobs WHERE status IN ('queued', 'in_flight', 'waiting_retry')`,
    );
    expect(unfinished.rows[0].n).toBe(2);
  });

  it('deleting a config during a backoff wait cancels the delivery without another request', async () => {
    receiver = await startReceiver({ script: () => ({ status: 503 }) });
    stack = await startStack(env, `delivery-${++queue}`, { env: {} });
    const taskId = `task-${queue}`;
    await createConfig(stack, taskId, { id: 'cfg', url: receiver.url });
    const ev = await writeEvent(stack, taskId, { task: { id: taskId } });
    await receiver.waitFor(1);
    const jobId = ev.deliveries[0]!.id;
    // Wait until the job is in its backoff wait (the test fails if it never gets there).
    await eventually(
      () => jobRow(stack!, jobId),
      (j) => j.status === 'waiting_retry',
    );
    const del = await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs/cfg`, { method: 'DELETE' });
    expect(del.status).toBe(204);
    // The delete's wake ends the job at once: it does not wait out the backoff.
    await closedWhileTimeStands(jobId);
    const r = await result(jobId);
    expect(r).toMatchObject({ status: 'cancelled', reason: 'config_deleted' });
    expect(receiver.requests).toHaveLength(1);
  });

  it('a deleted config id reused by a new config does not inherit the old jobs', async () => {
    receiver = await startReceiver({ script: () => ({ status: 200 }) });
    stack = await startStack(env, `delivery-${++queue}`, { env: {} });
    const taskId = `task-${queue}`;
    await createConfig(stack, taskId, { id: 'cfg', url: receiver.url });
    const ev1 = await writeEvent(stack, taskId, { task: { id: taskId } });
    await result(ev1.deliveries[0]!.id);
    await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs/cfg`, { method: 'DELETE' });
    await createConfig(stack, taskId, { id: 'cfg', url: receiver.url });
    const list = await json(stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs/cfg/deliveries`));
    expect(list.deliveries).toEqual([]);
  });
});
