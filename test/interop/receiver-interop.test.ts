/**
 * Receiver interop: agents built on the two reference SDKs (@a2a-js/sdk 1.3.0 and a2a-sdk 1.3.0 for
 * Python), whose own push senders call our inbox, and whose own servers answer our workflow's GetTask
 * and CreateTaskPushNotificationConfig. Real Postgres, the run's Temporal dev server, HTTPS on 127.0.0.1.
 */
import crypto from 'node:crypto';
import { makeRegistrationWorkflowId } from '../../src/ids';
import {
  connectDevServer,
  eventually,
  json,
  startStack,
  type InboxSeen,
  type Json,
  type Stack,
} from '../helpers/harness';
import { startReceiver } from '../helpers/receiver';
import {
  closeClientFetch,
  sendMessage,
  startPeer,
  writeMeasurements,
  type AgentPeer,
  type Binding,
  type PeerKind,
} from './peers';

jest.setTimeout(90_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
/** Polling only every hour: whatever moves a registration here is a push (or the id's arrival). */
let pushStack: Stack;
/** Polling every 1-2 s and a bound of one unprocessed callback: resolution without pushes, 429s. */
let pollStack: Stack;
const seen = new Map<Stack, InboxSeen[]>();
const measured: Record<string, unknown> = {};

const queue = () => `interop-rx-${crypto.randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  temporal = await connectDevServer();
  const push: InboxSeen[] = [];
  const poll: InboxSeen[] = [];
  pushStack = await startStack(temporal, queue(), {
    env: { POLL_INITIAL: '1h', POLL_MAX: '1h' },
    inboxTap: (s) => push.push(s),
  });
  pollStack = await startStack(temporal, queue(), {
    env: { POLL_INITIAL: '1s', POLL_MAX: '2s', INBOX_BOUND_PER_REGISTRATION: '1' },
    inboxTap: (s) => poll.push(s),
  });
  seen.set(pushStack, push);
  seen.set(pollStack, poll);
});
afterAll(async () => {
  writeMeasurements('receiver', measured);
  await pushStack?.close();
  await pollStack?.close();
  await temporal?.close();
  await closeClientFetch();
});

async function register(stack: Stack, body: Record<string, unknown>): Promise<Json> {
  const res = await stack.api('/v1/registrations', { method: 'POST', json: body });
  const b: Json = await res.json();
  if (res.status !== 201) throw new Error(`register: ${res.status} ${JSON.stringify(b)}`);
  return b;
}

const registration = (stack: Stack, id: string): Promise<Json> => json(stack.api(`/v1/registrations/${id}`));
const until = (stack: Stack, id: string, ok: (r: Json) => boolean, timeoutMs = 20_000) =>
  eventually(() => registration(stack, id), ok, timeoutMs);

async function feedOf(stack: Stack, id: string): Promise<Json[]> {
  const page = await json(stack.api('/v1/resolutions?after=0&limit=1000'));
  return (page.items as Json[]).filter((i) => i.registrationId === id);
}

const inboxSaw = (stack: Stack, id: string) => seen.get(stack)!.filter((s) => s.path === `/a2a/push/${id}`);

const storedCallbacks = async (stack: Stack, id: string) =>
  Number(
    (await stack.tdb.db.query('SELECT count(*) AS n FROM inbox_callbacks WHERE registration_id = $1', [id]))
      .rows[0].n,
  );

/** The headers a push arrived with at our inbox, as a record for docs/interop.md. */
function describeHeaders(s: InboxSeen, credential: string, token?: string) {
  const h = s.headers;
  return {
    contentType: h['content-type'],
    authorization:
      h.authorization === undefined
        ? null
        : h.authorization === `Bearer ${credential}`
          ? 'Bearer <callback credential>'
          : 'other',
    notificationToken:
      h['x-a2a-notification-token'] === undefined
        ? null
        : h['x-a2a-notification-token'] === token
          ? '<config token>'
          : h['x-a2a-notification-token'] === credential
            ? '<callback credential>'
            : 'other',
    a2aVersion: h['a2a-version'] ?? null,
    userAgent: h['user-agent'] ?? null,
    names: Object.keys(h).sort(),
    /** the HTTP client's own headers, as they arrived */
    client: Object.fromEntries(
      ['accept', 'accept-encoding', 'accept-language', 'sec-fetch-mode', 'connection']
        .filter((n) => h[n] !== undefined)
        .map((n) => [n, h[n]]),
    ),
  };
}

const payloadKinds = (bodies: string[]) => bodies.map((b) => Object.keys(JSON.parse(b) as object)[0]);

describe.each([
  ['js', 'JSONRPC'],
  ['js', 'HTTP+JSON'],
  ['python', 'JSONRPC'],
  ['python', 'HTTP+JSON'],
] as Array<[PeerKind, Binding]>)(
  '%s reference SDK agent over %s → our inbox and workflow',
  (kind, binding) => {
    let agent: AgentPeer;
    beforeAll(async () => {
      agent = await startPeer(kind, binding);
    });
    afterAll(async () => {
      await agent?.close();
    });

    /** WORKING → INPUT_REQUIRED → COMPLETED, each step pushed by the agent and confirmed by our GetTask. */
    async function driveToCompletion(reg: Json, taskId: string) {
      const inputAt = Date.now();
      await agent.command(taskId, 'TASK_STATE_INPUT_REQUIRED');
      await eventually(
        () => feedOf(pushStack, reg.id),
        (items) => items.some((i) => i.state === 'TASK_STATE_INPUT_REQUIRED'),
        15_000,
      );
      const inputMs = Date.now() - inputAt;
      // nr-llm answers the agent's question: a follow-up message resumes the task in WORKING.
      expect(await sendMessage(agent.url, undefined, taskId)).toBe(taskId);
      await until(pushStack, reg.id, (r) => r.remoteState === 'TASK_STATE_WORKING');
      const completedAt = Date.now();
      await agent.command(taskId, 'TASK_STATE_COMPLETED');
      const done = await until(pushStack, reg.id, (r) => r.status === 'resolved', 15_000);
      // Recorded for docs/interop.md, not checked (bench/ times things). No poll comes within the hour:
      // the pushes made our workflow call GetTask.
      const completedMs = Date.now() - completedAt;
      expect(done).toMatchObject({
        status: 'resolved',
        remoteState: 'TASK_STATE_COMPLETED',
        remoteTaskId: taskId,
      });
      // The run has ended (its last step deletes the remote push config, best effort): nothing of this
      // registration reaches the agent or the feed after this, and the next test starts clean.
      await temporal.client.workflow.getHandle(makeRegistrationWorkflowId(reg.id)).result();
      const feed = await feedOf(pushStack, reg.id);
      expect(feed.map((i) => [i.kind, i.state, i.terminal])).toEqual([
        ['state', 'TASK_STATE_INPUT_REQUIRED', false],
        ['state', 'TASK_STATE_COMPLETED', true],
      ]);
      expect(feed.every((i) => i.remoteTaskId === taskId)).toBe(true);
      return { inputMs, completedMs, callbacks: done.callbacks };
    }

    it('embedded: our config rides in SendMessage; the SDK pushes each state to the inbox; GetTask resolves it once', async () => {
      const reg = await register(pushStack, { mode: 'embedded', agent: { url: agent.url } });
      const cfg = reg.pushNotificationConfig;
      const credential: string = cfg.authentication.credentials;
      // nr-llm's own token beside our credential: the Python SDK sends it as X-A2A-Notification-Token.
      const token = `nr-llm-token-${kind}`;
      const taskId = await sendMessage(agent.url, {
        id: cfg.id,
        url: cfg.url,
        token,
        authentication: cfg.authentication,
      });
      // The SDK pushed {task: WORKING} at once; it is kept against the pending registration.
      const pending = await until(pushStack, reg.id, (r) => r.callbacks.received >= 1);
      expect(pending.status).toBe('pending');
      expect(
        await json(
          pushStack.api(`/v1/registrations/${reg.id}/remote-task`, {
            method: 'POST',
            json: { remoteTaskId: taskId },
          }),
        ),
      ).toMatchObject({ status: 'active' });
      const active = await until(pushStack, reg.id, (r) => r.remoteState === 'TASK_STATE_WORKING');
      expect(active).toMatchObject({ status: 'active', callbacks: { pending: 0 } });

      const timing = await driveToCompletion(reg, taskId);

      const pushes = await agent.pushesTo(cfg.url);
      expect(payloadKinds(pushes.map((p) => p.body))).toEqual([
        'task',
        'statusUpdate',
        'statusUpdate',
        'statusUpdate',
      ]);
      expect(pushes.map((p) => p.status)).toEqual([200, 200, 200, 200]);
      const arrived = inboxSaw(pushStack, reg.id);
      expect(arrived.map((s) => s.status)).toEqual([200, 200, 200, 200]);
      expect(timing.callbacks).toMatchObject({ received: 4, pending: 0 });
      expect(await storedCallbacks(pushStack, reg.id)).toBe(4);
      const headers = arrived.map((s) => describeHeaders(s, credential, token));
      for (const h of headers) {
        expect(h.authorization).toBe('Bearer <callback credential>');
        expect(h.a2aVersion).toBeNull();
      }
      // The differences docs/interop.md records: media type, the token header, the HTTP client.
      for (const h of headers) {
        if (kind === 'js') {
          expect(h).toMatchObject({
            contentType: 'application/a2a+json',
            notificationToken: null,
            userAgent: 'undici',
          });
        } else {
          expect(h).toMatchObject({ contentType: 'application/json', notificationToken: '<config token>' });
          expect(h.userAgent).toMatch(/^python-httpx\//);
        }
      }
      // Our workflow reached the agent through the SDK client, A2A-Version on every call.
      const methods = await agent.methods();
      expect(methods.map((m) => m.method)).toEqual(expect.arrayContaining(['SendMessage', 'GetTask']));
      // Every call on the binding the card lists first, with A2A-Version (which the Python server requires).
      for (const m of methods) expect(m).toMatchObject({ binding, a2aVersion: '1.0' });
      // At resolution our service deleted its config on the agent.
      await eventually(
        () => agent.configs(taskId),
        (cs) => cs.length === 0,
      );
      measured[`${kind}.${binding}.embedded`] = {
        headers: headers[0],
        payloads: payloadKinds(pushes.map((p) => p.body)),
        firstBody: JSON.parse(pushes[0]!.body),
        inboxAnswers: arrived.map((s) => s.status),
        msFromCommandToFeed: { inputRequired: timing.inputMs, completed: timing.completedMs },
        agentMethods: methods,
      };
    });

    it('separate: our service creates the config on the agent (CreateTaskPushNotificationConfig); the SDK pushes; it resolves once', async () => {
      const taskId = await sendMessage(agent.url);
      const reg = await register(pushStack, {
        mode: 'separate',
        remoteTaskId: taskId,
        agent: { url: agent.url, bearerToken: 'nr-llm-agent-token' },
      });
      expect(reg.status).toBe('active');
      const active = await until(pushStack, reg.id, (r) => r.remoteState === 'TASK_STATE_WORKING');
      expect(active).toMatchObject({ pushEnabled: true, status: 'active' });
      const configs = await agent.configs(taskId);
      expect(configs).toEqual([
        expect.objectContaining({
          id: reg.id,
          url: `${pushStack.inboxUrl}/a2a/push/${reg.id}`,
          scheme: 'Bearer',
        }),
      ]);
      const credential = configs[0]!.credentials!;
      const methods = (await agent.methods()).filter((m) => m.method !== 'SendMessage');
      const sinceCreate = methods.slice(
        methods.findIndex((m) => m.method === 'CreateTaskPushNotificationConfig'),
      );
      expect(sinceCreate.map((m) => m.method).slice(0, 2)).toEqual([
        'CreateTaskPushNotificationConfig',
        'GetTask',
      ]);
      for (const m of sinceCreate) expect(m).toMatchObject({ binding, a2aVersion: '1.0' });

      const timing = await driveToCompletion(reg, taskId);

      const url = `${pushStack.inboxUrl}/a2a/push/${reg.id}`;
      const pushes = await agent.pushesTo(url);
      expect(payloadKinds(pushes.map((p) => p.body))).toEqual([
        'statusUpdate',
        'statusUpdate',
        'statusUpdate',
      ]);
      expect(pushes.map((p) => p.status)).toEqual([200, 200, 200]);
      const arrived = inboxSaw(pushStack, reg.id);
      expect(arrived.map((s) => s.status)).toEqual([200, 200, 200]);
      expect(timing.callbacks).toMatchObject({ received: 3, pending: 0 });
      const headers = arrived.map((s) => describeHeaders(s, credential));
      for (const h of headers)
        expect(h).toMatchObject({ authorization: 'Bearer <callback credential>', notificationToken: null });
      measured[`${kind}.${binding}.separate`] = {
        headers: headers[0],
        payloads: payloadKinds(pushes.map((p) => p.body)),
        inboxAnswers: arrived.map((s) => s.status),
        msFromCommandToFeed: { inputRequired: timing.inputMs, completed: timing.completedMs },
        agentMethods: sinceCreate,
      };
    });

    it('an unknown task: the SDK answers TaskNotFound; the registration ends failed (remote_task_not_found), fed once', async () => {
      const taskId = `no-such-task-${crypto.randomUUID()}`;
      const before = (await agent.methods()).length;
      const reg = await register(pushStack, {
        mode: 'separate',
        remoteTaskId: taskId,
        agent: { url: agent.url },
      });
      const failed = await until(pushStack, reg.id, (r) => r.status === 'failed');
      expect(failed).toMatchObject({ reason: 'remote_task_not_found' });
      const feed = await feedOf(pushStack, reg.id);
      expect(feed.map((i) => [i.kind, i.reason, i.terminal])).toEqual([
        ['failed', 'remote_task_not_found', true],
      ]);
      const methods = (await agent.methods()).slice(before).map((m) => m.method);
      expect(methods).toEqual(['CreateTaskPushNotificationConfig', 'GetTask']);
      measured[`${kind}.${binding}.unknownTask`] = {
        registration: { pushEnabled: failed.pushEnabled, reason: failed.reason },
        lastMethods: methods,
      };
    });
  },
);

describe.each(['js', 'python'] as PeerKind[])('%s reference SDK agent against our 401 and 429', (kind) => {
  let agent: AgentPeer;
  beforeAll(async () => {
    agent = await startPeer(kind);
  });
  afterAll(async () => {
    await agent?.close();
  });

  it('a config with only a token (no authentication): the SDK sends only the token header; 401, nothing stored; polling resolves it', async () => {
    const errorsBefore = (await agent.senderErrors()).length;
    const reg = await register(pollStack, { mode: 'embedded', agent: { url: agent.url } });
    const cfg = reg.pushNotificationConfig;
    const credential: string = cfg.authentication.credentials;
    const taskId = await sendMessage(agent.url, { id: cfg.id, url: cfg.url, token: credential });
    const first = await eventually(
      async () => inboxSaw(pollStack, reg.id),
      (s) => s.length >= 1,
    );
    expect(first[0]!.status).toBe(401);
    expect(describeHeaders(first[0]!, credential)).toMatchObject({
      authorization: null,
      notificationToken: '<callback credential>',
    });
    await pollStack.api(`/v1/registrations/${reg.id}/remote-task`, {
      method: 'POST',
      json: { remoteTaskId: taskId },
    });
    await until(pollStack, reg.id, (r) => r.remoteState === 'TASK_STATE_WORKING');
    const completedAt = Date.now();
    await agent.command(taskId, 'TASK_STATE_COMPLETED');
    const done = await until(pollStack, reg.id, (r) => r.status === 'resolved');
    const resolvedMs = Date.now() - completedAt;
    expect(done).toMatchObject({
      remoteState: 'TASK_STATE_COMPLETED',
      callbacks: { received: 0, pending: 0 },
    });
    expect(await storedCallbacks(pollStack, reg.id)).toBe(0);
    const feed = await feedOf(pollStack, reg.id);
    expect(feed.filter((i) => i.terminal)).toHaveLength(1);
    // One POST per event, none repeated after the 401: counted once the SDK has reported giving up on
    // both (it reports a push only when it is done with it).
    const errors = await eventually(
      () => agent.senderErrors(),
      (e) => e.length >= errorsBefore + 2,
    );
    const pushes = await agent.pushesTo(cfg.url);
    expect(payloadKinds(pushes.map((p) => p.body))).toEqual(['task', 'statusUpdate']);
    expect(pushes.map((p) => p.status)).toEqual([401, 401]);
    expect(inboxSaw(pollStack, reg.id).map((s) => s.status)).toEqual([401, 401]);
    measured[`${kind}.tokenOnly`] = {
      headers: describeHeaders(first[0]!, credential),
      inboxAnswers: inboxSaw(pollStack, reg.id).map((s) => s.status),
      postsPerEvent: 1,
      senderLogged: errors
        .slice(-1)[0]
        ?.replace(/[0-9a-f-]{36}/g, '<id>')
        .replace(/https:\/\/\S+/g, '<url>'),
      resolvedByPollingMs: resolvedMs,
    };
  });

  it('a 429 from our bound (Retry-After: 5): the SDK drops that push, never retries it; the task still resolves', async () => {
    const errorsBefore = (await agent.senderErrors()).length;
    const reg = await register(pollStack, { mode: 'embedded', agent: { url: agent.url } });
    const cfg = reg.pushNotificationConfig;
    const taskId = await sendMessage(agent.url, {
      id: cfg.id,
      url: cfg.url,
      authentication: cfg.authentication,
    });
    await until(pollStack, reg.id, (r) => r.callbacks.pending === 1);
    // The registration is pending (no task id yet), so its one stored callback fills the bound.
    await agent.command(taskId, 'TASK_STATE_INPUT_REQUIRED');
    const limited = await eventually(
      async () => inboxSaw(pollStack, reg.id),
      (s) => s.length >= 2,
    );
    expect(limited.map((s) => s.status)).toEqual([200, 429]);
    // The SDK is done with the 429'd push (it reports it failed) rather than keeping it for a retry.
    await eventually(
      () => agent.senderErrors(),
      (e) => e.length >= errorsBefore + 1,
    );
    await pollStack.api(`/v1/registrations/${reg.id}/remote-task`, {
      method: 'POST',
      json: { remoteTaskId: taskId },
    });
    await until(pollStack, reg.id, (r) => r.remoteState === 'TASK_STATE_INPUT_REQUIRED');
    await sendMessage(agent.url, undefined, taskId);
    // With a bound of one, COMPLETED must wait until the WORKING callback has been processed.
    await until(
      pollStack,
      reg.id,
      (r) => r.remoteState === 'TASK_STATE_WORKING' && r.callbacks.pending === 0,
    );
    await agent.command(taskId, 'TASK_STATE_COMPLETED');
    const done = await until(pollStack, reg.id, (r) => r.status === 'resolved');
    expect(done.remoteState).toBe('TASK_STATE_COMPLETED');
    // No second try of the dropped push: it was reported failed, and every later push came after it.
    const pushes = await agent.pushesTo(cfg.url);
    expect(payloadKinds(pushes.map((p) => p.body))).toEqual([
      'task',
      'statusUpdate',
      'statusUpdate',
      'statusUpdate',
    ]);
    expect(pushes.map((p) => p.status)).toEqual([200, 429, 200, 200]);
    expect(inboxSaw(pollStack, reg.id).map((s) => s.status)).toEqual([200, 429, 200, 200]);
    const feed = await feedOf(pollStack, reg.id);
    expect(feed.filter((i) => i.terminal)).toHaveLength(1);
    const errors = await agent.senderErrors();
    measured[`${kind}.rateLimited`] = {
      inboxAnswers: inboxSaw(pollStack, reg.id).map((s) => s.status),
      retried: false,
      senderLogged: errors
        .slice(-1)[0]
        ?.replace(/[0-9a-f-]{36}/g, '<id>')
        .replace(/https:\/\/\S+/g, '<url>'),
    };
  });
});

describe('each reference SDK sender against a receiver that never answers', () => {
  // How long each SDK waits (5 s for both, machine.md) is not timed here: bench/ times things.
  it('gives up after its timeout, once, and only logs it', async () => {
    const hanging = await startReceiver({ path: '/hang', script: () => ({ hang: true }) });
    const peers = await Promise.all((['js', 'python'] as PeerKind[]).map((k) => startPeer(k)));
    try {
      const results = await Promise.all(
        peers.map(async (agent) => {
          const url = `${hanging.url}/${agent.kind}`;
          await sendMessage(agent.url, {
            id: 'hang',
            url,
            authentication: { scheme: 'Bearer', credentials: 'x' },
          });
          // Python logs the failure when its client gives up; JS records the failed fetch.
          const errors = await eventually(
            () => agent.senderErrors(),
            (e) => e.length >= 1,
            15_000,
          );
          // Counted once the SDK has reported giving up (a retry would come before that report).
          const arrived = hanging.requests.filter((r) => r.path === `/hang/${agent.kind}`);
          return { kind: agent.kind, attempts: arrived.length, logged: errors[0]! };
        }),
      );
      for (const r of results) {
        expect(r.attempts).toBe(1);
        measured[`${r.kind}.timeout`] = {
          attempts: r.attempts,
          logged: r.logged.replace(/[0-9a-f-]{36}/g, '<id>').replace(/https:\/\/\S+/g, '<url>'),
        };
      }
    } finally {
      await Promise.all(peers.map((p) => p.close()));
      await hanging.close();
    }
  });
});
