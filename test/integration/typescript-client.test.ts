import crypto from 'node:crypto';
import createClient from 'openapi-fetch';
import type { paths, Problem, PushConfigPage } from '../clients/a2a-push-api';
import { startTestAgent, type TestAgent } from '../helpers/agent';
import { connectDevServer, eventually, startStack, type Stack } from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

/*
 * The README's calls through the typed TypeScript client: openapi-fetch over the types openapi-typescript
 * makes from /v1/openapi.json (test/clients/a2a-push-api.ts, kept current by
 * test/unit/typescript-client.test.ts). Every request and answer below is checked by tsc against the
 * document; the PHP client makes the same walk in `npm run test:clients`.
 */
jest.setTimeout(90_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let receiver: Receiver;
let agent: TestAgent;
let api: ReturnType<typeof createClient<paths>>;
const AGENT_TOKEN = 'nr-llm-token-for-agent';
/** Every timestamp the service writes: RFC 3339, UTC, with Z. */
const UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;

beforeAll(async () => {
  temporal = await connectDevServer();
  stack = await startStack(temporal, `ts-client-${crypto.randomBytes(4).toString('hex')}`, {
    env: {},
    // Long-polls re-read the feed only this rarely without a notification: an early answer is NOTIFY's.
    feedRecheckMs: 120_000,
  });
  receiver = await startReceiver({ path: '/hook' });
  agent = await startTestAgent({ requireBearer: AGENT_TOKEN });
  api = createClient<paths>({
    baseUrl: stack.apiUrl,
    headers: { Authorization: `Bearer ${stack.apiKey}` },
  });
});
afterAll(async () => {
  await agent?.close();
  await receiver?.close();
  await stack?.close();
  await temporal?.close();
});

const taskPath = (taskId: string) => ({ params: { path: { taskId } } });
const problemType = (p: Problem | undefined) => p?.type;

describe('the typed TypeScript client (openapi-fetch) walks the README', () => {
  const task = `ts-${crypto.randomBytes(4).toString('hex')}`;

  it('push config, event with an Idempotency-Key, delivered delivery, lists, paging, problems, delete', async () => {
    const created = await api.POST('/v1/tasks/{taskId}/pushNotificationConfigs', {
      ...taskPath(task),
      body: {
        id: 'nr-llm-1',
        url: receiver.url,
        token: 'client-token',
        authentication: { scheme: 'Bearer', credentials: 's3cret-credential' },
      },
    });
    expect(created.response.status).toBe(201);
    expect(created.data).toMatchObject({
      id: 'nr-llm-1',
      taskId: task,
      status: 'active',
      authentication: { scheme: 'Bearer', credentials: '********' },
    });
    expect(created.data!.createdAt).toMatch(UTC);
    const read = await api.GET('/v1/tasks/{taskId}/pushNotificationConfigs/{configId}', {
      params: { path: { taskId: task, configId: 'nr-llm-1' } },
    });
    expect(read.data).toEqual(created.data);

    const event = {
      params: { path: { taskId: task }, header: { 'Idempotency-Key': `evt-${task}` } },
      body: { streamResponse: { statusUpdate: { taskId: task, status: { state: 'TASK_STATE_COMPLETED' } } } },
    };
    const written = await api.POST('/v1/tasks/{taskId}/events', event);
    expect(written.response.status).toBe(202);
    expect(written.data!.deliveries).toEqual([{ id: expect.any(String), configId: 'nr-llm-1' }]);
    const replayed = await api.POST('/v1/tasks/{taskId}/events', event);
    expect(replayed.response.headers.get('idempotent-replayed')).toBe('true');
    expect(replayed.data).toEqual(written.data);

    const id = written.data!.deliveries[0]!.id;
    const delivery = await eventually(
      async () => (await api.GET('/v1/deliveries/{id}', { params: { path: { id } } })).data!,
      (d) => d.status === 'delivered',
      30_000,
    );
    expect(delivery).toMatchObject({
      reason: 'http_200',
      eventId: written.data!.eventId,
      configId: 'nr-llm-1',
    });
    expect(delivery.attempts).toEqual([
      expect.objectContaining({
        n: 1,
        outcome: 'delivered',
        httpStatus: 200,
        startedAt: expect.stringMatching(UTC),
      }),
    ]);
    for (const t of [delivery.createdAt, delivery.deadline, delivery.finishedAt]) expect(t).toMatch(UTC);
    expect(receiver.requests.map((r) => r.headers['x-a2a-push-delivery'])).toContain(id);

    const page = await api.GET('/v1/tasks/{taskId}/pushNotificationConfigs/{configId}/deliveries', {
      params: { path: { taskId: task, configId: 'nr-llm-1' } },
    });
    expect(page.data!.deliveries.map((d) => d.id)).toEqual([id]);
    const again = await api.POST('/v1/deliveries/{id}:retry', { params: { path: { id } } });
    expect(again.response.status).toBe(409);
    expect(problemType(again.error)).toBe('urn:a2a-push:problem:conflict');

    const mine = await api.GET('/v1/tasks/{taskId}/pushNotificationConfigs', taskPath(task));
    expect(mine.data!.configs.map((c) => c.id)).toEqual(['nr-llm-1']);
    const tenant = await api.GET('/v1/pushNotificationConfigs', { params: { query: { status: 'active' } } });
    expect(tenant.data!.configs.map((c) => `${c.taskId}/${c.id}`)).toContain(`${task}/nr-llm-1`);

    // Paging: five configs, two a page.
    const paged = `${task}-paged`;
    const made: string[] = [];
    for (const n of ['a', 'b', 'c', 'd', 'e']) {
      const c = await api.POST('/v1/tasks/{taskId}/pushNotificationConfigs', {
        ...taskPath(paged),
        body: { id: n, url: receiver.url },
      });
      made.push(c.data!.id);
    }
    const seen: string[] = [];
    let pages = 0;
    let pageToken: string | undefined = '0';
    while (pageToken !== undefined) {
      const p: { data?: PushConfigPage } = await api.GET('/v1/tasks/{taskId}/pushNotificationConfigs', {
        params: { path: { taskId: paged }, query: { pageSize: 2, pageToken } },
      });
      pages++;
      seen.push(...p.data!.configs.map((c) => c.id));
      pageToken = p.data!.nextPageToken;
    }
    expect([pages, seen]).toEqual([3, made]);

    // problem+json answers come back as the typed Problem.
    const refused = await api.POST('/v1/tasks/{taskId}/pushNotificationConfigs', {
      ...taskPath(task),
      body: { url: 'https://metadata.google.internal/hook' },
    });
    expect(refused.response.status).toBe(400);
    expect(refused.error).toMatchObject({
      type: 'urn:a2a-push:problem:guard_refused',
      rule: 'forbidden_host',
      errors: [{ path: 'url', message: expect.any(String) }],
    });
    const absent = await api.GET('/v1/tasks/{taskId}/pushNotificationConfigs/{configId}', {
      params: { path: { taskId: task, configId: 'absent' } },
    });
    expect([absent.response.status, problemType(absent.error)]).toEqual([
      404,
      'urn:a2a-push:problem:not_found',
    ]);
    const unknown = await api.GET('/v1/deliveries/{id}', {
      params: { path: { id: '00000000-0000-4000-8000-000000000000' } },
    });
    expect(unknown.response.status).toBe(404);

    const deleted = await api.DELETE('/v1/tasks/{taskId}/pushNotificationConfigs/{configId}', {
      params: { path: { taskId: task, configId: 'nr-llm-1' } },
    });
    expect(deleted.response.status).toBe(204);
    const gone = await api.GET('/v1/tasks/{taskId}/pushNotificationConfigs/{configId}', {
      params: { path: { taskId: task, configId: 'nr-llm-1' } },
    });
    expect(gone.response.status).toBe(404);
  });

  it('registration created and read, resolved within the long-poll, audit paged, deleted', async () => {
    agent.setState('rt-1', 'TASK_STATE_COMPLETED');
    const created = await api.POST('/v1/registrations', {
      body: { mode: 'embedded', agent: { url: agent.url, bearerToken: AGENT_TOKEN } },
    });
    expect(created.response.status).toBe(201);
    const reg = created.data!;
    expect(reg).toMatchObject({ status: 'pending', pushEnabled: true, agent: { url: agent.url } });
    expect(reg.pushNotificationConfig).toMatchObject({
      id: reg.id,
      url: `${stack.inboxUrl}/a2a/push/${reg.id}`,
      authentication: { scheme: 'Bearer', credentials: expect.not.stringMatching(/^\*+$/) },
    });
    const read = await api.GET('/v1/registrations/{id}', { params: { path: { id: reg.id } } });
    expect(read.data).toMatchObject({ status: 'pending', callbacks: { received: 0, pending: 0, late: 0 } });
    expect(read.data!.createdAt).toMatch(UTC);

    // The long-poll starts before the resolution exists and answers when it arrives, well within its wait.
    const { data: before } = await api.GET('/v1/resolutions', {
      params: { query: { after: '0', limit: 1000 } },
    });
    const started = Date.now();
    const polled = api.GET('/v1/resolutions', { params: { query: { after: before!.nextCursor, wait: 30 } } });
    const active = await api.POST('/v1/registrations/{id}/remote-task', {
      params: { path: { id: reg.id } },
      body: { remoteTaskId: 'rt-1' },
    });
    expect(active.data).toMatchObject({ status: 'active', remoteTaskId: 'rt-1' });
    const { data: feed } = await polled;
    expect(Date.now() - started).toBeLessThan(25_000);
    expect(feed!.items).toEqual([
      expect.objectContaining({
        registrationId: reg.id,
        remoteTaskId: 'rt-1',
        kind: 'state',
        state: 'TASK_STATE_COMPLETED',
        terminal: true,
        observedAt: expect.stringMatching(UTC),
      }),
    ]);
    const resolved = await api.GET('/v1/registrations/{id}', { params: { path: { id: reg.id } } });
    expect(resolved.data).toMatchObject({ status: 'resolved', resolvedAt: expect.stringMatching(UTC) });

    const actions: string[] = [];
    let after = '0';
    let pages = 0;
    for (;;) {
      const { data } = await api.GET('/v1/audit', { params: { query: { after, limit: 3 } } });
      if (data!.items.length === 0) break;
      pages++;
      for (const item of data!.items) {
        expect(item.at).toMatch(UTC);
        actions.push(`${item.action} ${item.objectId}`);
      }
      after = data!.nextCursor;
    }
    expect(pages).toBeGreaterThan(1);
    expect(actions).toEqual(expect.arrayContaining([`registration.created ${reg.id}`]));

    const deleted = await api.DELETE('/v1/registrations/{id}', { params: { path: { id: reg.id } } });
    expect(deleted.response.status).toBe(204);
    const after2 = await api.GET('/v1/registrations/{id}', { params: { path: { id: reg.id } } });
    expect(after2.data!.status).toBe('deleted');
  });
});
