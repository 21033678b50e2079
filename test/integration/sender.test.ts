import crypto from 'node:crypto';
import {
  configRow,
  connectDevServer,
  createConfig,
  deliveryResult,
  eventually,
  jobRow,
  startStack,
  writeEvent,
  type Stack,
  json,
  type Json,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { createRegistry } from '../../src/metrics';

jest.setTimeout(60_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let receiver: Receiver;
const queue = `sender-it-${crypto.randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  temporal = await connectDevServer();
  receiver = await startReceiver();
  stack = await startStack(temporal, queue, { env: { RETRY_INITIAL: '1s', RETRY_MAX: '2s' } });
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
  await temporal?.close();
});

const delivery = (id: string) => json(stack.api(`/v1/deliveries/${id}`));

describe('sender end to end (dev server, HTTP API)', () => {
  it('create → event → delivered, with the contract headers and the body byte for byte', async () => {
    receiver.setScript(() => ({ status: 200 }));
    const before = receiver.requests.length;
    await createConfig(stack, 'task-e2e', {
      id: 'c1',
      url: receiver.url,
      token: 'opaque-token-value',
      authentication: { scheme: 'bearer', credentials: 'cred-e2e-secret' },
    });
    const raw = `{"streamResponse":  {"statusUpdate": {"taskId":"task-e2e", "status":{"state":"TASK_STATE_COMPLETED"},"9":1, "final" : true}}}`;
    const res = await stack.api('/v1/tasks/task-e2e/events', {
      method: 'POST',
      body: raw,
      headers: { 'content-type': 'application/a2a+json; charset=utf-8' },
    });
    expect(res.status).toBe(202);
    const ev = (await res.json()) as { eventId: string; deliveries: Array<{ id: string; configId: string }> };
    expect(ev.deliveries).toEqual([{ id: expect.any(String), configId: 'c1' }]);
    const d = await eventually(
      () => delivery(ev.deliveries[0]!.id),
      (d) => d.status === 'delivered',
    );
    expect(d).toMatchObject({
      configId: 'c1',
      taskId: 'task-e2e',
      eventId: ev.eventId,
      attempts: [{ n: 1, outcome: 'delivered', httpStatus: 200 }],
    });
    const got = receiver.requests.slice(before);
    expect(got).toHaveLength(1);
    const req = got[0]!;
    expect(req.method).toBe('POST');
    expect(req.headers['content-type']).toBe('application/a2a+json');
    expect(req.headers.authorization).toBe('Bearer cred-e2e-secret');
    expect(req.headers['x-a2a-notification-token']).toBeUndefined();
    expect(Object.values(req.headers).join(' ')).not.toContain('opaque-token-value');
    expect(req.body.toString('utf8')).toBe(
      `{"statusUpdate": {"taskId":"task-e2e", "status":{"state":"TASK_STATE_COMPLETED"},"9":1, "final" : true}}`,
    );
  });

  it("the worker's metrics count each attempt by outcome and time it (contract §7)", async () => {
    /** What a scrape of the worker's /metrics shows (the registry src/services.ts serves there). */
    const scrape = async () => {
      const text = await createRegistry('worker').metrics();
      const num = (re: RegExp) => Number(re.exec(text)?.[1] ?? 0);
      return {
        delivered: num(/^a2a_push_deliveries_total\{outcome="delivered",process="worker"\} (\d+)$/m),
        retried: num(/^a2a_push_deliveries_total\{outcome="retry",process="worker"\} (\d+)$/m),
        timed: num(/^a2a_push_attempt_duration_seconds_count\{process="worker"\} (\d+)$/m),
      };
    };
    const before = await scrape();
    let n = 0;
    receiver.setScript(() => ({ status: n++ === 0 ? 503 : 200 }));
    await createConfig(stack, 'task-metrics', { id: 'c1', url: receiver.url });
    const { deliveries } = await writeEvent(stack, 'task-metrics', {
      statusUpdate: { taskId: 'task-metrics', status: { state: 'TASK_STATE_WORKING' } },
    });
    await eventually(
      () => delivery(deliveries[0]!.id),
      (d) => d.status === 'delivered',
    );
    const after = await scrape();
    expect({
      delivered: after.delivered - before.delivered,
      retried: after.retried - before.retried,
      timed: after.timed - before.timed,
    }).toEqual({ delivered: 1, retried: 1, timed: 2 });
  });

  it('escaped lone surrogates and raw non-ASCII reach the receiver byte for byte (also with an Idempotency-Key)', async () => {
    receiver.setScript(() => ({ status: 200 }));
    const before = receiver.requests.length;
    await createConfig(stack, 'task-u8', { id: 'c-u8', url: receiver.url });
    const value =
      '{"statusUpdate":{"taskId":"task-u8","status":{"state":"TASK_STATE_WORKING","message":' +
      '{"parts":[{"text":"\\ud800 lone, \\udc00 lone, \\ud83d\\ude00 paired, é🙂 raw"}]}}}}';
    const res = await stack.api('/v1/tasks/task-u8/events', {
      method: 'POST',
      body: Buffer.from(`{"streamResponse":${value}}`, 'utf8'),
      headers: { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID() },
    });
    expect(res.status).toBe(202);
    const ev = (await res.json()) as { deliveries: Array<{ id: string }> };
    await eventually(
      () => delivery(ev.deliveries[0]!.id),
      (d) => d.status === 'delivered',
    );
    const got = receiver.requests.slice(before);
    expect(got).toHaveLength(1);
    expect(got[0]!.body.toString('hex')).toBe(Buffer.from(value, 'utf8').toString('hex'));
  });

  it('a config without authentication sends no Authorization header and never the token', async () => {
    receiver.setScript(() => ({ status: 204 }));
    const before = receiver.requests.length;
    await createConfig(stack, 'task-token', { id: 't', url: receiver.url, token: 'only-a-token' });
    const ev = await writeEvent(stack, 'task-token', { task: { id: 'task-token' } });
    await eventually(
      () => delivery(ev.deliveries[0]!.id),
      (d) => d.status === 'delivered',
    );
    const req = receiver.requests.slice(before)[0]!;
    expect(req.headers.authorization).toBeUndefined();
    expect(req.headers['x-a2a-notification-token']).toBeUndefined();
    expect(JSON.stringify(req.headers)).not.toContain('only-a-token');
  });

  it('deleting a config during a backoff wait ends the delivery cancelled promptly, with no further request', async () => {
    // Long waits, so only the wake can end the job promptly.
    // Its own task queue (not `${queue}-slow`: that is the first stack's slow lane).
    const slow = await startStack(temporal, `${queue}-long-waits`, {
      env: { RETRY_INITIAL: '10m', RETRY_MAX: '1h' },
    });
    const r = await startReceiver({ script: () => ({ status: 503 }) });
    try {
      await createConfig(slow, 'task-del', { id: 'c', url: r.url });
      const ev = await writeEvent(slow, 'task-del', { task: { id: 'task-del' } });
      const id = ev.deliveries[0]!.id;
      await eventually(
        () => jobRow(slow, id),
        (j) => j.status === 'waiting_retry',
      );
      expect(
        (await slow.api('/v1/tasks/task-del/pushNotificationConfigs/c', { method: 'DELETE' })).status,
      ).toBe(204);
      // Cancelled at all means the wake ended the 10-minute wait (no clock needed to tell).
      const j = await eventually(
        () => jobRow(slow, id),
        (j) => j.status === 'cancelled',
        60_000,
      );
      expect(j.reason).toBe('config_deleted');
      expect(r.requests).toHaveLength(1);
      // The workflow ended too.
      const handle = temporal.client.workflow.getHandle(makeDeliveryWorkflowId(id));
      await eventually(
        () => handle.describe().then((d) => d.status.name),
        (st) => st === 'COMPLETED',
        5_000,
      );
    } finally {
      await slow.close();
      await r.close();
    }
  });

  it('the credential never appears in Get/List answers nor in the workflow history', async () => {
    receiver.setScript(() => ({ status: 200 }));
    const secret = `hist-secret-${crypto.randomBytes(8).toString('hex')}`;
    const created = await createConfig(stack, 'task-hist', {
      id: 'h',
      url: receiver.url,
      authentication: { scheme: 'Bearer', credentials: secret },
    });
    expect(created.authentication).toEqual({ scheme: 'Bearer', credentials: '********' });
    const one = await (await stack.api('/v1/tasks/task-hist/pushNotificationConfigs/h')).text();
    const list = await (await stack.api('/v1/tasks/task-hist/pushNotificationConfigs')).text();
    expect(one).not.toContain(secret);
    expect(list).not.toContain(secret);
    expect(JSON.parse(one).authentication.credentials).toBe('********');
    const ev = await writeEvent(stack, 'task-hist', { message: { messageId: 'm1', taskId: 'task-hist' } });
    const id = ev.deliveries[0]!.id;
    await eventually(
      () => delivery(id),
      (d) => d.status === 'delivered',
    );
    // The run's end: under lean the attempt's marker is recorded after the job row says delivered.
    await deliveryResult(temporal.client, id);
    const history = await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(id)).fetchHistory();
    const text = JSON.stringify(history);
    expect(text.length).toBeGreaterThan(500);
    expect(text).not.toContain(secret);
    expect(text).not.toContain(Buffer.from(secret).toString('base64'));
    // Nor does the body of the event travel through history: workflows carry ids.
    expect(text).not.toContain('m1');
    const audit = await stack.tdb.db.query('SELECT * FROM audit_log');
    expect(JSON.stringify(audit.rows)).not.toContain(secret);
    const sealed = await stack.tdb.db.query('SELECT ciphertext FROM sealed_secrets');
    expect(sealed.rows.some((r) => Buffer.from(r.ciphertext).toString('utf8').includes(secret))).toBe(false);
  });

  it('an event for a task without active configs is stored with no deliveries', async () => {
    const ev = await writeEvent(stack, 'task-none', { task: { id: 'task-none' } });
    expect(ev.deliveries).toEqual([]);
  });

  it(':retry makes a new delivery of the same event with a fresh deadline; 409 on a delivered job', async () => {
    receiver.setScript(() => ({ status: 500 }));
    await createConfig(stack, 'task-retry', { id: 'r', url: receiver.url });
    const ev = await writeEvent(stack, 'task-retry', { task: { id: 'task-retry' } });
    const id = ev.deliveries[0]!.id;
    await eventually(
      () => delivery(id),
      (d) => d.status === 'failed',
    );
    receiver.setScript(() => ({ status: 200 }));
    const res = await stack.api(`/v1/deliveries/${id}:retry`, { method: 'POST' });
    expect(res.status).toBe(201);
    const again = (await res.json()) as { id: string; eventId: string; deadline: string };
    expect(again.eventId).toBe(ev.eventId);
    expect(again.id).not.toBe(id);
    const d2 = await eventually(
      () => delivery(again.id),
      (d) => d.status === 'delivered',
    );
    expect(new Date(d2.deadline).getTime()).toBeGreaterThan(
      new Date((await delivery(id)).deadline).getTime(),
    );
    const conflict = await stack.api(`/v1/deliveries/${again.id}:retry`, { method: 'POST' });
    expect(conflict.status).toBe(409);
    expect(conflict.headers.get('content-type')).toContain('application/problem+json');
    // The config's deliveries, newest first.
    const page = await json(
      stack.api('/v1/tasks/task-retry/pushNotificationConfigs/r/deliveries?pageSize=1'),
    );
    expect(page.deliveries.map((d: { id: string }) => d.id)).toEqual([again.id]);
    const page2 = await json(
      stack.api(
        `/v1/tasks/task-retry/pushNotificationConfigs/r/deliveries?pageSize=1&pageToken=${page.nextPageToken}`,
      ),
    );
    expect(page2.deliveries.map((d: { id: string }) => d.id)).toEqual([id]);
    expect(page2.nextPageToken).toBeUndefined();
  });

  it('a 401 from the receiver pauses the config; it then takes no new jobs and :retry is 409', async () => {
    receiver.setScript(() => ({ status: 401 }));
    await createConfig(stack, 'task-401', { id: 'x', url: receiver.url });
    const ev = await writeEvent(stack, 'task-401', { task: { id: 'task-401' } });
    const id = ev.deliveries[0]!.id;
    await eventually(
      () => delivery(id),
      (d) => d.status === 'auth_failed',
    );
    expect(await configRow(stack, 'task-401', 'x')).toEqual({
      status: 'auth_failed',
      status_reason: 'http_401',
    });
    const cfg = await json(stack.api('/v1/tasks/task-401/pushNotificationConfigs/x'));
    expect(cfg).toMatchObject({ status: 'auth_failed', statusReason: 'http_401' });
    expect((await writeEvent(stack, 'task-401', { task: { id: 'task-401' } })).deliveries).toEqual([]);
    expect((await stack.api(`/v1/deliveries/${id}:retry`, { method: 'POST' })).status).toBe(409);
    const audit = await stack.tdb.db.query(
      `SELECT actor, action, before, after FROM audit_log WHERE object_id = 'task-401/x' ORDER BY cursor`,
    );
    expect(audit.rows).toEqual([
      { actor: expect.stringMatching(/^key_/), action: 'push_config.created', before: null, after: 'active' },
      {
        actor: 'system',
        action: 'push_config.status_changed',
        before: 'active',
        after: 'auth_failed (http_401)',
      },
    ]);
    // The same rows through GET /v1/audit, paged by cursor.
    const seen: Json[] = [];
    let after = '0';
    for (;;) {
      const page = await json(stack.api(`/v1/audit?after=${after}&limit=2`));
      seen.push(...page.items);
      if (page.items.length === 0) break;
      after = page.nextCursor;
    }
    const mine = seen.filter((a) => a.objectId === 'task-401/x');
    expect(mine.map((a) => [a.action, a.before, a.after])).toEqual([
      ['push_config.created', undefined, 'active'],
      ['push_config.status_changed', 'active', 'auth_failed (http_401)'],
    ]);
    expect(JSON.stringify(seen)).not.toContain('cred-e2e-secret');
  });
});
