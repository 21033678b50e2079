/**
 * A controllable A2A v1.0 agent for tests, built on @a2a-js/sdk's own server: its request handler,
 * in-memory task and push-config stores and DefaultPushNotificationSender, behind its Express
 * handlers for both JSON-RPC and HTTP+JSON, served over HTTPS with the test certificate on
 * 127.0.0.1. Tests seed task states directly into the task store and trigger the SDK's own pushes.
 *
 * The SDK's push sender calls the global `fetch` and takes no dispatcher, so while any test agent is
 * open the global `fetch` is replaced by undici's `fetch` over an Agent that also trusts the test CA
 * (and reports each answer back to push()). This is test code: it is not behind our address guard.
 */
import { createServer, type Server } from 'node:https';
import type { Socket } from 'node:net';
import { rootCertificates } from 'node:tls';
import express, {
  type NextFunction,
  type Request as ExpressRequest,
  type Response as ExpressResponse,
} from 'express';
import { Agent as UndiciAgent, fetch as undiciFetch } from 'undici';
import {
  TaskState,
  taskStateFromJSON,
  taskStateToJSON,
  type AgentCard,
  type StreamResponse,
  type Task,
  type TaskPushNotificationConfig,
} from '@a2a-js/sdk';
import {
  AgentEvent,
  DefaultPushNotificationSender,
  DefaultRequestHandler,
  InMemoryPushNotificationStore,
  InMemoryTaskStore,
  ServerCallContext,
  type AgentExecutor,
} from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler, restHandler } from '@a2a-js/sdk/server/express';
import { makeTestTls, type TestTls } from './tls';

export type AgentTaskState =
  | 'TASK_STATE_WORKING'
  | 'TASK_STATE_INPUT_REQUIRED'
  | 'TASK_STATE_COMPLETED'
  | 'TASK_STATE_FAILED'
  | 'TASK_STATE_CANCELED'
  | 'TASK_STATE_REJECTED'
  | 'TASK_STATE_AUTH_REQUIRED'
  | 'TASK_STATE_SUBMITTED';

export interface AgentCall {
  n: number;
  method: string;
  path: string;
  /** the JSON-RPC method name, e.g. 'GetTask', 'CreateTaskPushNotificationConfig' */
  rpcMethod?: string;
  kind: 'card' | 'getTask' | 'createPushConfig' | 'deletePushConfig' | 'sendMessage' | 'other';
  authorization?: string;
  a2aVersion?: string;
  /** the W3C trace headers the caller sent */
  traceparent?: string;
  tracestate?: string;
  at: number;
  body?: unknown;
}

export interface AgentPushConfig {
  id: string;
  url: string;
  token?: string;
  authentication?: { scheme: string; credentials: string };
}

/** One POST the SDK's push sender made, as it left the sender (headers as the sender set them). */
export interface AgentPushRecord {
  url: string;
  headers: Record<string, string>;
  body: string;
  at: number;
  /** the answer's status; 0 when there was none (the error is in `error`) */
  status: number;
  answeredAt: number;
  error?: string;
}

export interface TestAgent {
  /** A2A base URL, https://127.0.0.1:PORT */
  url: string;
  /** every request received, in order */
  calls: AgentCall[];
  /** every POST the agent's push sender made, in order (from SendMessage runs and push() alike) */
  pushLog: AgentPushRecord[];
  /**
   * With `commanded`: publishes the state as a statusUpdate on the running task's event bus, so the
   * SDK's request handler stores it and its sender pushes it; a terminal state ends the task, and
   * INPUT_REQUIRED waits for a follow-up SendMessage to the task (which resumes it in WORKING).
   * Resolves once the SDK has stored it (GetTask answers it).
   */
  command(taskId: string, state: AgentTaskState): Promise<void>;
  /** create or update a task the agent reports on GetTask (sends no push) */
  setState(taskId: string, state: AgentTaskState): void;
  /** the task's configs as the agent's push store holds them */
  pushConfigs(taskId: string): AgentPushConfig[];
  /**
   * Holds the next GetTask: it is received and recorded (`reached` resolves), then answered only once
   * `release()` is called, with the task's state at that moment.
   */
  holdNextGetTask(): { reached: Promise<void>; release(): void };
  /**
   * The agent's own DefaultPushNotificationSender pushes `{task}` with the task's current state to
   * every stored config of the task. Resolves with the answer each push got (status 0: no answer).
   */
  push(taskId: string): Promise<Array<{ url: string; status: number }>>;
  close(): Promise<void>;
}

export interface TestAgentOptions {
  /** the interface listed first in the card, which a client without preferences picks; default JSONRPC */
  transport?: 'JSONRPC' | 'HTTP+JSON';
  /** the card's capabilities.pushNotifications; default true */
  pushNotifications?: boolean;
  /** when set, every request without `Authorization: Bearer <it>` is answered 401 */
  requireBearer?: string;
  /**
   * The push store refuses every save: CreateTaskPushNotificationConfig fails with the SDK's internal
   * error (not PushNotificationNotSupported), though the card says push is supported.
   */
  refusePushConfigCreate?: boolean;
  tls?: TestTls;
  /** default: a free port */
  port?: number;
  /**
   * Tasks started by SendMessage stay in WORKING and wait for command(); by default the executor
   * answers WORKING and finishes, and tests drive states with setState and push.
   */
  commanded?: boolean;
}

const JSONRPC_PATH = '/a2a/jsonrpc';
const REST_PATH = '/a2a/rest';
const CARD_PATH = '/.well-known/agent-card.json';
const OWNER = 'test-agent';

// ---- the global fetch the SDK's push sender uses -------------------------------------------------

type PushObserver = (
  url: string,
  status: number,
  sent: { headers: Record<string, string>; body: string; at: number; error?: string },
) => void;
const trust = {
  refs: 0,
  original: undefined as typeof globalThis.fetch | undefined,
  cas: new Set<string>(),
  dispatcher: undefined as UndiciAgent | undefined,
  observers: new Set<PushObserver>(),
};

function trustingDispatcher(): UndiciAgent {
  trust.dispatcher ??= new UndiciAgent({ connect: { ca: [...rootCertificates, ...trust.cas] } });
  return trust.dispatcher;
}

function installTrustingFetch(caPem: string): void {
  if (!trust.cas.has(caPem)) {
    trust.cas.add(caPem);
    const old = trust.dispatcher;
    trust.dispatcher = undefined;
    void old?.close();
  }
  trust.refs += 1;
  if (trust.refs > 1) return;
  trust.original = globalThis.fetch;
  const patched = async (input: string | URL | globalThis.Request, init?: RequestInit): Promise<Response> => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    // undici's fetch takes no Request of Node's bundled fetch: carry one over as plain init fields.
    const fromRequest: Record<string, unknown> =
      input instanceof globalThis.Request
        ? { method: input.method, headers: [...input.headers], body: input.body, duplex: 'half' }
        : {};
    const options: Record<string, unknown> = {
      ...fromRequest,
      ...(init as Record<string, unknown>),
      dispatcher: trustingDispatcher(),
    };
    const sent = {
      headers: Object.fromEntries(new Headers(options.headers as ConstructorParameters<typeof Headers>[0])),
      body: typeof options.body === 'string' ? options.body : '',
      at: Date.now(),
    };
    try {
      const res = await undiciFetch(url, options as Parameters<typeof undiciFetch>[1]);
      for (const observe of trust.observers) observe(url, res.status, sent);
      return res as unknown as Response;
    } catch (err) {
      for (const observe of trust.observers)
        observe(url, 0, {
          ...sent,
          error: err instanceof Error ? `${err.name}: ${err.message}` : String(err),
        });
      throw err;
    }
  };
  globalThis.fetch = patched as typeof globalThis.fetch;
}

async function uninstallTrustingFetch(): Promise<void> {
  trust.refs -= 1;
  if (trust.refs > 0) return;
  if (trust.original) globalThis.fetch = trust.original;
  trust.original = undefined;
  const d = trust.dispatcher;
  trust.dispatcher = undefined;
  await d?.destroy();
}

// ---- stores -----------------------------------------------------------------------------------

/** The SDK's store, mirrored into a Map so tests can read it synchronously. */
class MirroredPushStore extends InMemoryPushNotificationStore {
  readonly mirror = new Map<string, TaskPushNotificationConfig[]>();
  /** every URL a config was ever saved with */
  readonly everSeen = new Set<string>();
  constructor(private readonly refuseSave = false) {
    super(() => OWNER);
  }
  override async save(
    taskId: string,
    ctx: ServerCallContext,
    cfg: TaskPushNotificationConfig,
  ): Promise<void> {
    if (this.refuseSave) throw new Error('push store unavailable');
    this.everSeen.add(cfg.url);
    await super.save(taskId, ctx, cfg);
    this.mirror.set(taskId, await super.load(taskId, ctx));
  }
  override async delete(taskId: string, ctx: ServerCallContext, configId?: string): Promise<void> {
    await super.delete(taskId, ctx, configId);
    this.mirror.set(taskId, await super.load(taskId, ctx));
  }
}

// ---- request classification -------------------------------------------------------------------

function restKind(method: string, path: string): AgentCall['kind'] {
  const rest = path.slice(REST_PATH.length).split('?')[0] ?? '';
  if (method === 'POST' && /^\/message:send$/.test(rest)) return 'sendMessage';
  if (method === 'GET' && /^\/tasks\/[^/:]+$/.test(rest)) return 'getTask';
  if (method === 'POST' && /^\/tasks\/[^/]+\/pushNotificationConfigs$/.test(rest)) return 'createPushConfig';
  if (method === 'DELETE' && /^\/tasks\/[^/]+\/pushNotificationConfigs\/[^/]+$/.test(rest))
    return 'deletePushConfig';
  return 'other';
}

const RPC_KINDS: Record<string, AgentCall['kind']> = {
  GetTask: 'getTask',
  CreateTaskPushNotificationConfig: 'createPushConfig',
  DeleteTaskPushNotificationConfig: 'deletePushConfig',
  SendMessage: 'sendMessage',
};

function header(req: ExpressRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

// ---- the agent --------------------------------------------------------------------------------

/** Answers any message with a task in WORKING; the tests drive states with setState. */
const finishingExecutor: AgentExecutor = {
  async execute(ctx, bus) {
    bus.publish(
      AgentEvent.task({
        id: ctx.taskId,
        contextId: ctx.contextId,
        status: {
          state: TaskState.TASK_STATE_WORKING,
          message: undefined,
          timestamp: new Date().toISOString(),
        },
        artifacts: [],
        history: [ctx.userMessage],
        metadata: undefined,
      }),
    );
    bus.finished();
  },
  async cancelTask() {
    return undefined;
  },
};

const TERMINAL: ReadonlySet<string> = new Set([
  'TASK_STATE_COMPLETED',
  'TASK_STATE_FAILED',
  'TASK_STATE_CANCELED',
  'TASK_STATE_REJECTED',
]);

/** Answers WORKING, then publishes each commanded state until a terminal one ends the task. */
function commandedExecutor(waiters: Map<string, Array<(s: AgentTaskState) => void>>): AgentExecutor {
  const next = (taskId: string) =>
    new Promise<AgentTaskState>((resolve) => {
      const list = waiters.get(taskId) ?? [];
      list.push(resolve);
      waiters.set(taskId, list);
    });
  const status = (state: AgentTaskState) => ({
    state: taskStateFromJSON(state),
    message: undefined,
    timestamp: new Date().toISOString(),
  });
  return {
    async execute(ctx, bus) {
      // A new task starts in WORKING; a follow-up message to an interrupted task resumes it in WORKING.
      if (ctx.task === undefined)
        bus.publish(
          AgentEvent.task({
            id: ctx.taskId,
            contextId: ctx.contextId,
            status: status('TASK_STATE_WORKING'),
            artifacts: [],
            history: [ctx.userMessage],
            metadata: undefined,
          }),
        );
      else
        bus.publish(
          AgentEvent.statusUpdate({
            taskId: ctx.taskId,
            contextId: ctx.contextId,
            status: status('TASK_STATE_WORKING'),
            metadata: undefined,
          }),
        );
      for (;;) {
        const state = await next(ctx.taskId);
        bus.publish(
          AgentEvent.statusUpdate({
            taskId: ctx.taskId,
            contextId: ctx.contextId,
            status: status(state),
            metadata: undefined,
          }),
        );
        // The SDK ends this request's event stream at INPUT_REQUIRED; the follow-up message resumes.
        if (state === 'TASK_STATE_INPUT_REQUIRED') return;
        if (TERMINAL.has(state)) break;
      }
      waiters.delete(ctx.taskId);
      bus.finished();
    },
    async cancelTask() {
      return undefined;
    },
  };
}

export async function startTestAgent(o: TestAgentOptions = {}): Promise<TestAgent> {
  const tls = o.tls ?? makeTestTls();
  const preferred = o.transport ?? 'JSONRPC';
  const pushNotifications = o.pushNotifications ?? true;

  const server: Server = createServer({ cert: tls.certPem, key: tls.keyPem });
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('test agent: no TCP address');
  const url = `https://127.0.0.1:${address.port}`;

  const interfaces = [
    { url: `${url}${JSONRPC_PATH}`, protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' },
    { url: `${url}${REST_PATH}`, protocolBinding: 'HTTP+JSON', protocolVersion: '1.0', tenant: '' },
  ];
  if (preferred === 'HTTP+JSON') interfaces.reverse();
  const card: AgentCard = {
    name: 'a2a-push test agent',
    description: 'A controllable agent for tests',
    supportedInterfaces: interfaces,
    provider: undefined,
    version: '1.0.0',
    capabilities: { streaming: false, pushNotifications, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [],
    signatures: [],
  };

  const taskStore = new InMemoryTaskStore(() => OWNER);
  const pushStore = new MirroredPushStore(o.refusePushConfigCreate ?? false);
  const sender = new DefaultPushNotificationSender(pushStore);
  const waiters = new Map<string, Array<(s: AgentTaskState) => void>>();
  const executor = o.commanded ? commandedExecutor(waiters) : finishingExecutor;
  const handler = new DefaultRequestHandler(card, taskStore, executor, undefined, pushStore, sender);
  const ctx = (): ServerCallContext => new ServerCallContext({ requestedVersion: '1.0' });

  const calls: AgentCall[] = [];
  const app = express();
  app.disable('x-powered-by');
  app.use(express.json({ type: ['application/json', 'application/a2a+json'], strict: false }));
  // A body that does not parse is still recorded; the SDK would answer it with a parse error too.
  app.use((err: unknown, req: ExpressRequest, res: ExpressResponse, next: NextFunction) => {
    void next;
    record(req, undefined);
    res.status(400).json({ error: 'unparseable body' });
  });
  const record = (req: ExpressRequest, body: unknown): AgentCall => {
    const path = req.originalUrl;
    let kind: AgentCall['kind'] = 'other';
    let rpcMethod: string | undefined;
    if (req.method === 'GET' && path.split('?')[0] === CARD_PATH) kind = 'card';
    else if (path.startsWith(REST_PATH)) kind = restKind(req.method, path);
    else if (path.split('?')[0] === JSONRPC_PATH && typeof body === 'object' && body !== null) {
      const m = (body as { method?: unknown }).method;
      if (typeof m === 'string') {
        rpcMethod = m;
        kind = RPC_KINDS[m] ?? 'other';
      }
    }
    const call: AgentCall = { n: calls.length + 1, method: req.method, path, kind, at: Date.now() };
    if (rpcMethod !== undefined) call.rpcMethod = rpcMethod;
    const authorization = header(req, 'authorization');
    if (authorization !== undefined) call.authorization = authorization;
    const a2aVersion = header(req, 'a2a-version');
    if (a2aVersion !== undefined) call.a2aVersion = a2aVersion;
    const traceparent = header(req, 'traceparent');
    if (traceparent !== undefined) call.traceparent = traceparent;
    const tracestate = header(req, 'tracestate');
    if (tracestate !== undefined) call.tracestate = tracestate;
    if (body !== undefined) call.body = body;
    calls.push(call);
    return call;
  };
  let hold: { reached: () => void; released: Promise<void> } | undefined;
  app.use((req: ExpressRequest, res: ExpressResponse, next: NextFunction) => {
    const call = record(req, req.body);
    if (call.kind === 'getTask' && hold) {
      const h = hold;
      hold = undefined;
      h.reached();
      void h.released.then(() => next());
      return;
    }
    if (o.requireBearer !== undefined && header(req, 'authorization') !== `Bearer ${o.requireBearer}`) {
      res.status(401).set('WWW-Authenticate', 'Bearer').json({ error: 'unauthorized' });
      return;
    }
    next();
  });
  app.use(CARD_PATH, agentCardHandler({ agentCardProvider: handler, cache: { maxAge: 0 } }));
  app.use(
    JSONRPC_PATH,
    jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }),
  );
  app.use(REST_PATH, restHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  server.on('request', app);

  installTrustingFetch(tls.caPem);
  let closed = false;
  // Every push the sender makes goes to a URL that was once in this agent's push store.
  const pushLog: AgentPushRecord[] = [];
  const logPush: PushObserver = (u, status, sent) => {
    if (pushStore.everSeen.has(u)) pushLog.push({ url: u, ...sent, status, answeredAt: Date.now() });
  };
  trust.observers.add(logPush);

  return {
    url,
    calls,
    pushLog,
    holdNextGetTask() {
      let reached!: () => void;
      let release!: () => void;
      const r = new Promise<void>((res) => (reached = res));
      hold = { reached, released: new Promise<void>((res) => (release = res)) };
      return { reached: r, release };
    },
    async command(taskId, state) {
      const until = Date.now() + 5000;
      // A resumed task's executor starts waiting a moment after the follow-up message is answered.
      while (!waiters.get(taskId)?.length) {
        if (Date.now() > until) throw new Error(`test agent: task ${taskId} is not waiting for a command`);
        await new Promise((r) => setTimeout(r, 10));
      }
      waiters.get(taskId)!.shift()!(state);
      for (;;) {
        const t = await taskStore.load(taskId, ctx());
        if (t?.status && taskStateToJSON(t.status.state) === state) return;
        if (Date.now() > until) throw new Error(`test agent: task ${taskId} did not reach ${state}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    setState(taskId, state) {
      const task: Task = {
        id: taskId,
        contextId: `ctx-${taskId}`,
        status: { state: taskStateFromJSON(state), message: undefined, timestamp: new Date().toISOString() },
        artifacts: [],
        history: [],
        metadata: undefined,
      };
      // InMemoryTaskStore.save stores before its first await, so the task is there on return.
      void taskStore.save(task, ctx());
    },
    pushConfigs(taskId) {
      return (pushStore.mirror.get(taskId) ?? []).map((c) => {
        const out: AgentPushConfig = { id: c.id, url: c.url };
        if (c.token) out.token = c.token;
        if (c.authentication) {
          out.authentication = { scheme: c.authentication.scheme, credentials: c.authentication.credentials };
        }
        return out;
      });
    },
    async push(taskId) {
      const task = await taskStore.load(taskId, ctx());
      if (task === undefined) throw new Error(`test agent: no task ${taskId}`);
      const targets = new Set((pushStore.mirror.get(taskId) ?? []).map((c) => c.url));
      const answers: Array<{ url: string; status: number }> = [];
      const observe: PushObserver = (u, status) => {
        if (targets.has(u)) answers.push({ url: u, status });
      };
      trust.observers.add(observe);
      try {
        const event: StreamResponse = { payload: { $case: 'task', value: task } };
        await sender.send(event, ctx(), task);
      } finally {
        trust.observers.delete(observe);
      }
      return answers;
    },
    async close() {
      if (closed) return;
      closed = true;
      trust.observers.delete(logPush);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
      await uninstallTrustingFetch();
    },
  };
}
