/**
 * The remote-agent adapter against a real @a2a-js/sdk agent over HTTPS on 127.0.0.1, through our
 * guarded outbound client, on both bindings. Scripted receivers stand in for agents that misbehave
 * in ways the SDK's server never does (bare HTTP statuses, bad cards, refused interface URLs).
 */
import { A2A_ERROR_CODE, fromRestErrorBody, JsonRpcTransportError } from '@a2a-js/sdk/errors';
import {
  JsonRpcPushNotificationNotSupportedError,
  JsonRpcTaskNotFoundError,
  RestPushNotificationNotSupportedError,
  RestTaskNotFoundError,
} from '@a2a-js/sdk/errors';
import {
  INTERRUPTED_STATES,
  TERMINAL_STATES,
  classifyRemoteError,
  connectRemoteAgent,
  type RemoteAgent,
} from '../../src/a2a';
import { OutboundError, compilePolicy, createOutboundClient, type OutboundClient } from '../../src/outbound';
import { startTestAgent, type AgentTaskState, type TestAgent } from '../helpers/agent';
import { startReceiver, type Receiver, type ReceivedRequest } from '../helpers/receiver';
import { makeTestTls } from '../helpers/tls';

const tls = makeTestTls();
const TOKEN = 'agent-bearer-6f1d2c';
const loopback = compilePolicy('127.0.0.0/8', '');

let http: OutboundClient;
const open: Array<{ close(): Promise<void> }> = [];

beforeAll(() => {
  http = createOutboundClient({ policy: loopback, ca: tls.caPem });
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});
afterAll(async () => {
  await http.close();
});

async function agent(o: Parameters<typeof startTestAgent>[0] = {}): Promise<TestAgent> {
  const a = await startTestAgent({ tls, ...o });
  open.push(a);
  return a;
}

async function receiver(script: (req: ReceivedRequest) => ReturnType<Parameters<Receiver['setScript']>[0]>) {
  const r = await startReceiver({ tls, script, path: '' });
  open.push(r);
  return r;
}

const json = (body: unknown, status = 200) => ({
  status,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
});

/** An agent card naming one interface, for scripted agents. */
const cardFor = (url: string, binding = 'JSONRPC', pushNotifications = true) => ({
  name: 'scripted',
  description: 'scripted agent',
  version: '1',
  supportedInterfaces: [{ url, protocolBinding: binding, protocolVersion: '1.0' }],
  capabilities: { pushNotifications },
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [],
});

describe.each(['JSONRPC', 'HTTP+JSON'] as const)('over %s', (transport) => {
  const remoteOf = (a: TestAgent, bearerToken: string | undefined = TOKEN): RemoteAgent =>
    connectRemoteAgent({ http, agentUrl: a.url, ...(bearerToken === undefined ? {} : { bearerToken }) });

  test('getTask reports the state the agent holds, with A2A-Version and the bearer on every call', async () => {
    const a = await agent({ transport, requireBearer: TOKEN });
    const remote = remoteOf(a);
    const states: AgentTaskState[] = [
      'TASK_STATE_SUBMITTED',
      'TASK_STATE_WORKING',
      'TASK_STATE_INPUT_REQUIRED',
      'TASK_STATE_AUTH_REQUIRED',
      'TASK_STATE_COMPLETED',
      'TASK_STATE_FAILED',
      'TASK_STATE_CANCELED',
      'TASK_STATE_REJECTED',
    ];
    for (const state of states) {
      a.setState('task-1', state);
      await expect(remote.getTask('task-1')).resolves.toEqual({
        ok: true,
        value: { id: 'task-1', state, contextId: 'ctx-task-1' },
      });
    }
    // The card is read once per adapter instance; each GetTask went over the card's first interface.
    expect(a.calls.map((c) => c.kind)).toEqual(['card', ...states.map(() => 'getTask')]);
    const [cardCall, firstCall] = a.calls;
    expect(cardCall?.path).toBe('/.well-known/agent-card.json');
    if (transport === 'JSONRPC') {
      expect(firstCall).toMatchObject({ method: 'POST', path: '/a2a/jsonrpc', rpcMethod: 'GetTask' });
    } else {
      expect(firstCall).toMatchObject({ method: 'GET', path: '/a2a/rest/tasks/task-1?historyLength=0' });
    }
    for (const c of a.calls) {
      expect(c.a2aVersion).toBe('1.0');
      expect(c.authorization).toBe(`Bearer ${TOKEN}`);
    }
  });

  test('getTask of a task the agent does not know is task_not_found', async () => {
    const a = await agent({ transport });
    await expect(remoteOf(a).getTask('no-such-task')).resolves.toEqual({
      ok: false,
      failure: { kind: 'task_not_found' },
    });
  });

  test('a wrong bearer token is auth_failed with the 401, and the token never shows', async () => {
    const a = await agent({ transport, requireBearer: TOKEN });
    const remote = remoteOf(a, 'wrong-token');
    a.setState('task-1', 'TASK_STATE_WORKING');
    const results = [
      await remote.getTask('task-1'),
      await remote.card(),
      await remote.createPushConfig('task-1', { id: 'c', url: 'https://127.0.0.1:1/x', credentials: 's' }),
    ];
    for (const r of results) expect(r).toEqual({ ok: false, failure: { kind: 'auth_failed', status: 401 } });
    expect(JSON.stringify(results)).not.toContain('wrong-token');
    // The card answered 401, so no client exists and every call re-reads the card.
    expect(a.calls.map((c) => c.kind)).toEqual(['card', 'card', 'card']);
  });

  test('createPushConfig stores exactly the id, url and authentication; the same id replaces; delete removes', async () => {
    const a = await agent({ transport, requireBearer: TOKEN });
    const remote = remoteOf(a);
    a.setState('task-1', 'TASK_STATE_WORKING');

    const first = await remote.createPushConfig('task-1', {
      id: 'reg-1',
      url: 'https://callbacks.example.com/a2a/push/reg-1',
      credentials: 'cred-one',
    });
    expect(first).toEqual({ ok: true, value: { id: 'reg-1' } });
    expect(a.pushConfigs('task-1')).toEqual([
      {
        id: 'reg-1',
        url: 'https://callbacks.example.com/a2a/push/reg-1',
        authentication: { scheme: 'Bearer', credentials: 'cred-one' },
      },
    ]);

    const again = await remote.createPushConfig('task-1', {
      id: 'reg-1',
      url: 'https://callbacks.example.com/a2a/push/reg-1?v=2',
      credentials: 'cred-two',
    });
    expect(again).toEqual({ ok: true, value: { id: 'reg-1' } });
    expect(a.pushConfigs('task-1')).toEqual([
      {
        id: 'reg-1',
        url: 'https://callbacks.example.com/a2a/push/reg-1?v=2',
        authentication: { scheme: 'Bearer', credentials: 'cred-two' },
      },
    ]);

    await expect(remote.deletePushConfig('task-1', 'reg-1')).resolves.toEqual({ ok: true, value: undefined });
    expect(a.pushConfigs('task-1')).toEqual([]);
    // Absent config, and absent task: both count as deleted.
    await expect(remote.deletePushConfig('task-1', 'reg-1')).resolves.toEqual({ ok: true, value: undefined });
    await expect(remote.deletePushConfig('no-such-task', 'reg-1')).resolves.toEqual({
      ok: true,
      value: undefined,
    });

    const kinds = a.calls.map((c) => c.kind);
    expect(kinds).toEqual([
      'card',
      'createPushConfig',
      'createPushConfig',
      'deletePushConfig',
      'deletePushConfig',
      'deletePushConfig',
    ]);
    if (transport === 'JSONRPC') {
      expect(a.calls[1]?.body).toMatchObject({
        method: 'CreateTaskPushNotificationConfig',
        params: {
          taskId: 'task-1',
          id: 'reg-1',
          url: 'https://callbacks.example.com/a2a/push/reg-1',
          authentication: { scheme: 'Bearer', credentials: 'cred-one' },
        },
      });
    } else {
      expect(a.calls[1]).toMatchObject({
        method: 'POST',
        path: '/a2a/rest/tasks/task-1/pushNotificationConfigs',
      });
      expect(a.calls[3]).toMatchObject({
        method: 'DELETE',
        path: '/a2a/rest/tasks/task-1/pushNotificationConfigs/reg-1',
      });
    }
    for (const c of a.calls) expect(c.a2aVersion).toBe('1.0');
  });

  test('createPushConfig on a task the agent does not know is task_not_found', async () => {
    const a = await agent({ transport });
    const r = await remoteOf(a).createPushConfig('no-such-task', {
      id: 'reg-1',
      url: 'https://callbacks.example.com/x',
      credentials: 'c',
    });
    expect(r).toEqual({ ok: false, failure: { kind: 'task_not_found' } });
  });

  test('a card without push support: card() says so, createPushConfig is push_not_supported, delete is ok', async () => {
    const a = await agent({ transport, pushNotifications: false });
    const remote = remoteOf(a);
    a.setState('task-1', 'TASK_STATE_WORKING');
    const preferredFirst = transport === 'JSONRPC' ? ['JSONRPC', 'HTTP+JSON'] : ['HTTP+JSON', 'JSONRPC'];
    await expect(remote.card()).resolves.toEqual({
      ok: true,
      value: { pushNotifications: false, transports: preferredFirst },
    });
    await expect(
      remote.createPushConfig('task-1', {
        id: 'reg-1',
        url: 'https://callbacks.example.com/x',
        credentials: 'c',
      }),
    ).resolves.toEqual({ ok: false, failure: { kind: 'push_not_supported' } });
    // The SDK client refuses from the card without a call; delete does go out, and the agent's
    // PushNotificationNotSupported answer means there is nothing to delete.
    await expect(remote.deletePushConfig('task-1', 'reg-1')).resolves.toEqual({ ok: true, value: undefined });
    expect(a.calls.map((c) => c.kind)).toEqual(['card', 'deletePushConfig']);
  });

  test('push(): the agent’s own sender posts the task to the stored config', async () => {
    const a = await agent({ transport });
    const r = await receiver(() => ({ status: 200, body: 'ok' }));
    const remote = remoteOf(a);
    a.setState('task-1', 'TASK_STATE_WORKING');
    await remote.createPushConfig('task-1', {
      id: 'reg-1',
      url: `${r.url}/a2a/push/reg-1`,
      credentials: 'cb-cred',
    });
    a.setState('task-1', 'TASK_STATE_COMPLETED');
    await expect(a.push('task-1')).resolves.toEqual([{ url: `${r.url}/a2a/push/reg-1`, status: 200 }]);
    const [got] = await r.waitFor(1);
    expect(got?.method).toBe('POST');
    expect(got?.path).toBe('/a2a/push/reg-1');
    expect(got?.headers['authorization']).toBe('Bearer cb-cred');
    expect(got?.headers['content-type']).toBe('application/a2a+json');
    expect(got?.headers['x-a2a-notification-token']).toBeUndefined();
    expect(got?.headers['a2a-version']).toBeUndefined();
    expect(JSON.parse(got?.body.toString() ?? '')).toEqual({
      task: expect.objectContaining({
        id: 'task-1',
        status: expect.objectContaining({ state: 'TASK_STATE_COMPLETED' }),
      }),
    });
  });
});

describe('any binding', () => {
  test('an agent URL the guard refuses is guard_refused with the rule, and the agent sees nothing', async () => {
    const a = await agent();
    const strict = createOutboundClient({ policy: compilePolicy('', ''), ca: tls.caPem });
    open.push(strict);
    const remote = connectRemoteAgent({ http: strict, agentUrl: a.url, bearerToken: TOKEN });
    const refused = { ok: false, failure: { kind: 'guard_refused', rule: 'private_address' } };
    await expect(remote.getTask('task-1')).resolves.toEqual(refused);
    await expect(remote.card()).resolves.toEqual(refused);
    await expect(remote.deletePushConfig('task-1', 'x')).resolves.toEqual(refused);
    expect(a.calls).toEqual([]);
  });

  test('a non-https agent URL is guard_refused by the scheme rule', async () => {
    const remote = connectRemoteAgent({ http, agentUrl: 'http://127.0.0.1:9', bearerToken: TOKEN });
    await expect(remote.getTask('t')).resolves.toEqual({
      ok: false,
      failure: { kind: 'guard_refused', rule: 'scheme' },
    });
  });

  test('an interface URL in the card that the guard refuses is guard_refused', async () => {
    const r = await receiver((req) =>
      req.path === '/.well-known/agent-card.json' ? json(cardFor('http://127.0.0.1:9/a2a')) : { status: 500 },
    );
    const remote = connectRemoteAgent({ http, agentUrl: r.url, bearerToken: TOKEN });
    await expect(remote.card()).resolves.toEqual({
      ok: true,
      value: { pushNotifications: true, transports: ['JSONRPC'] },
    });
    await expect(remote.getTask('t')).resolves.toEqual({
      ok: false,
      failure: { kind: 'guard_refused', rule: 'scheme' },
    });
    expect(r.requests.map((q) => q.path)).toEqual(['/.well-known/agent-card.json']);
  });

  test('concurrent first calls share one card read', async () => {
    const a = await agent();
    a.setState('t', 'TASK_STATE_WORKING');
    const remote = connectRemoteAgent({ http, agentUrl: a.url, bearerToken: TOKEN });
    const [one, two, card] = await Promise.all([remote.getTask('t'), remote.getTask('t'), remote.card()]);
    expect([one.ok, two.ok, card.ok]).toEqual([true, true, true]);
    expect(a.calls.filter((c) => c.kind === 'card')).toHaveLength(1);
  });

  test('an agent that does not answer in time is transient (timeout)', async () => {
    const r = await receiver(() => ({ hang: true }));
    const quick = createOutboundClient({ policy: loopback, ca: tls.caPem, fetchTimeoutMs: 300 });
    open.push(quick);
    await expect(connectRemoteAgent({ http: quick, agentUrl: r.url }).card()).resolves.toEqual({
      ok: false,
      failure: { kind: 'transient', detail: expect.stringMatching(/^timeout/) },
    });
  });

  test('an agent that is down is transient', async () => {
    const a = await startTestAgent({ tls });
    await a.close();
    const r = await connectRemoteAgent({ http, agentUrl: a.url, bearerToken: TOKEN }).getTask('t');
    expect(r).toEqual({
      ok: false,
      failure: { kind: 'transient', detail: expect.stringMatching(/^connection/) },
    });
  });

  test('a trailing slash on the agent URL reads the same card path', async () => {
    const a = await agent();
    a.setState('t', 'TASK_STATE_WORKING');
    const r = await connectRemoteAgent({ http, agentUrl: `${a.url}/`, bearerToken: TOKEN }).getTask('t');
    expect(r).toMatchObject({ ok: true, value: { state: 'TASK_STATE_WORKING' } });
    expect(a.calls[0]?.path).toBe('/.well-known/agent-card.json');
  });

  test('an agent URL with a path keeps its path for the card', async () => {
    const r = await receiver(() => ({ status: 404 }));
    await connectRemoteAgent({ http, agentUrl: `${r.url}/agents/one` }).card();
    expect(r.requests.map((q) => q.path)).toEqual(['/agents/one/.well-known/agent-card.json']);
  });

  test('a card fetch that fails or does not parse is transient, and the next call reads the card again', async () => {
    let answer = { status: 404, body: 'nope' } as ReturnType<typeof json>;
    const r = await receiver(() => answer);
    const remote = connectRemoteAgent({ http, agentUrl: r.url });
    await expect(remote.card()).resolves.toMatchObject({ ok: false, failure: { kind: 'transient' } });
    answer = { status: 200, headers: { 'content-type': 'application/json' }, body: '{not json' };
    await expect(remote.card()).resolves.toMatchObject({ ok: false, failure: { kind: 'transient' } });
    answer = json({ ...cardFor(`${r.url}/rpc`), supportedInterfaces: [] });
    await expect(remote.getTask('t')).resolves.toMatchObject({
      ok: false,
      failure: { kind: 'transient', detail: expect.stringContaining('No compatible transport') },
    });
    expect(r.requests).toHaveLength(3);
  });

  test('a 403 on a call after a readable card is auth_failed 403', async () => {
    const r = await receiver((req) =>
      req.path === '/.well-known/agent-card.json'
        ? json(cardFor(`https://127.0.0.1:${r.port}/rpc`))
        : { status: 403 },
    );
    const remote = connectRemoteAgent({ http, agentUrl: r.url, bearerToken: TOKEN });
    await expect(remote.getTask('t')).resolves.toEqual({
      ok: false,
      failure: { kind: 'auth_failed', status: 403 },
    });
  });

  test('a 5xx with a body that echoes the token is transient, the token redacted', async () => {
    const r = await receiver((req) =>
      req.path === '/.well-known/agent-card.json'
        ? json(cardFor(`https://127.0.0.1:${r.port}/rpc`))
        : { status: 502, body: `upstream saw ${String(req.headers['authorization'])}` },
    );
    const res = await connectRemoteAgent({ http, agentUrl: r.url, bearerToken: TOKEN }).getTask('t');
    expect(res).toMatchObject({ ok: false, failure: { kind: 'transient' } });
    const detail = res.ok ? '' : JSON.stringify(res.failure);
    expect(detail).toContain('502');
    expect(detail).toContain('[redacted]');
    expect(detail).not.toContain(TOKEN);
  });

  test('HTTP+JSON: a bare 404 on GetTask is task_not_found; on the JSON-RPC binding it is transient', async () => {
    const rest = await receiver((req) =>
      req.path === '/.well-known/agent-card.json'
        ? json(cardFor(`https://127.0.0.1:${rest.port}/v1`, 'HTTP+JSON'))
        : { status: 404, body: 'Not Found' },
    );
    await expect(connectRemoteAgent({ http, agentUrl: rest.url }).getTask('t')).resolves.toEqual({
      ok: false,
      failure: { kind: 'task_not_found' },
    });
    expect(rest.requests[1]?.path).toBe('/v1/tasks/t?historyLength=0');
    const rpc = await receiver((req) =>
      req.path === '/.well-known/agent-card.json'
        ? json(cardFor(`https://127.0.0.1:${rpc.port}/rpc`))
        : { status: 404, body: 'Not Found' },
    );
    await expect(connectRemoteAgent({ http, agentUrl: rpc.url }).getTask('t')).resolves.toMatchObject({
      ok: false,
      failure: { kind: 'transient' },
    });
  });

  test('JSON-RPC error objects in an HTTP 200 are classified by code', async () => {
    let code = A2A_ERROR_CODE.TASK_NOT_FOUND as number;
    const r = await receiver((req) => {
      if (req.path === '/.well-known/agent-card.json')
        return json(cardFor(`https://127.0.0.1:${r.port}/rpc`));
      const id = (JSON.parse(req.body.toString()) as { id: number }).id;
      return json({ jsonrpc: '2.0', id, error: { code, message: 'from the agent' } });
    });
    const remote = connectRemoteAgent({ http, agentUrl: r.url });
    await expect(remote.getTask('t')).resolves.toEqual({ ok: false, failure: { kind: 'task_not_found' } });
    code = A2A_ERROR_CODE.PUSH_NOTIFICATION_NOT_SUPPORTED;
    await expect(
      remote.createPushConfig('t', { id: 'x', url: 'https://callbacks.example.com/x', credentials: 'c' }),
    ).resolves.toEqual({ ok: false, failure: { kind: 'push_not_supported' } });
    code = A2A_ERROR_CODE.VERSION_NOT_SUPPORTED;
    await expect(remote.getTask('t')).resolves.toMatchObject({
      ok: false,
      failure: { kind: 'transient', detail: expect.stringContaining('-32009') },
    });
  });

  test('the push sender sends X-A2A-Notification-Token only for a config with a token and no authentication', async () => {
    const a = await agent();
    const r = await receiver(() => ({ status: 204 }));
    a.setState('task-1', 'TASK_STATE_INPUT_REQUIRED');
    // A token-only config, made with a raw JSON-RPC call (the adapter never sends `token`).
    const res = await http.fetch(`${a.url}/a2a/jsonrpc`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'a2a-version': '1.0' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'CreateTaskPushNotificationConfig',
        params: { taskId: 'task-1', id: 'tok', url: `${r.url}/tok`, token: 'tok-secret' },
      }),
    });
    expect(await res.json()).toMatchObject({ result: { id: 'tok' } });
    expect(a.pushConfigs('task-1')).toEqual([{ id: 'tok', url: `${r.url}/tok`, token: 'tok-secret' }]);
    await expect(a.push('task-1')).resolves.toEqual([{ url: `${r.url}/tok`, status: 204 }]);
    const [got] = await r.waitFor(1);
    expect(got?.headers['x-a2a-notification-token']).toBe('tok-secret');
    expect(got?.headers['authorization']).toBeUndefined();
  });

  test('push() reports status 0 for a config whose receiver does not answer', async () => {
    const a = await agent();
    const r = await startReceiver({ tls, path: '' });
    const deadUrl = `${r.url}/gone`;
    await r.close();
    a.setState('task-1', 'TASK_STATE_COMPLETED');
    await connectRemoteAgent({ http, agentUrl: a.url }).createPushConfig('task-1', {
      id: 'reg-1',
      url: deadUrl,
      credentials: 'c',
    });
    const errors = jest.spyOn(console, 'error').mockImplementation(() => undefined);
    try {
      await expect(a.push('task-1')).resolves.toEqual([{ url: deadUrl, status: 0 }]);
    } finally {
      errors.mockRestore();
    }
  });
});

describe('classifyRemoteError', () => {
  const refusal = new OutboundError('guard_refused', 'no', { rule: 'denied_cidr' });
  test.each([
    ['JSON-RPC TaskNotFound', new JsonRpcTaskNotFoundError(), 'getTask', { kind: 'task_not_found' }],
    [
      'REST TaskNotFound (ErrorInfo)',
      new RestTaskNotFoundError(),
      'createPushConfig',
      { kind: 'task_not_found' },
    ],
    [
      'REST bare 404 on GetTask',
      fromRestErrorBody({ message: 'x' }, { statusCode: 404 }),
      'getTask',
      { kind: 'task_not_found' },
    ],
    [
      'REST bare 404 on create',
      fromRestErrorBody({ message: 'x' }, { statusCode: 404 }),
      'createPushConfig',
      { kind: 'transient' },
    ],
    [
      'JSON-RPC PushNotificationNotSupported',
      new JsonRpcPushNotificationNotSupportedError(),
      'createPushConfig',
      { kind: 'push_not_supported' },
    ],
    [
      'REST PushNotificationNotSupported',
      new RestPushNotificationNotSupportedError(),
      'createPushConfig',
      { kind: 'push_not_supported' },
    ],
    [
      'REST 401',
      fromRestErrorBody({ message: 'x' }, { statusCode: 401 }),
      'getTask',
      { kind: 'auth_failed', status: 401 },
    ],
    [
      'unknown JSON-RPC code',
      new JsonRpcTransportError({ jsonrpc: '2.0', id: 1, error: { code: -32099, message: 'odd' } }),
      'getTask',
      { kind: 'transient' },
    ],
    ['guard refusal', refusal, 'card', { kind: 'guard_refused', rule: 'denied_cidr' }],
    [
      'guard refusal inside a TypeError',
      new TypeError('fetch failed', { cause: refusal }),
      'getTask',
      { kind: 'guard_refused', rule: 'denied_cidr' },
    ],
    [
      'timeout',
      new OutboundError('timeout', 'slow', { detail: 'timeout' }),
      'getTask',
      { kind: 'transient' },
    ],
    ['a plain Error', new Error('boom'), 'getTask', { kind: 'transient' }],
    ['a thrown string', 'boom', 'getTask', { kind: 'transient' }],
  ] as const)('%s', (_name, err, op, expected) => {
    expect(classifyRemoteError(err, op)).toMatchObject(expected);
  });

  test('the state lists', () => {
    expect(TERMINAL_STATES).toEqual([
      'TASK_STATE_COMPLETED',
      'TASK_STATE_FAILED',
      'TASK_STATE_CANCELED',
      'TASK_STATE_REJECTED',
    ]);
    expect(INTERRUPTED_STATES).toEqual(['TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED']);
  });
});
