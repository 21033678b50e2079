/**
 * The adapter the registration activities use to talk to a remote A2A agent (contract §2, §6): the
 * A2A client of @a2a-js/sdk, built on the guarded fetch of src/outbound, with every error turned into
 * a RemoteFailure. Nothing here throws, logs, or returns the agent's bearer token.
 *
 * How each SDK error surfaces (measured against the SDK's own server; see docs/a2a-client.md):
 * - a fetch failure (guard refusal, timeout, connection, DNS, TLS) is the guarded fetch's
 *   OutboundError, which the SDK passes on unchanged (sometimes as a TypeError's `cause`);
 * - JSON-RPC error objects become JsonRpc* errors carrying `envelopeCode` (-32001, -32003, …);
 * - HTTP+JSON errors become Rest* errors carrying `statusCode`, their class picked from the
 *   ErrorInfo `reason` in the body when there is one;
 * - a non-2xx answer on the JSON-RPC binding or the card is a plain Error whose status is only in
 *   its message text, so 401/403 are caught here in the fetch wrapper, as a typed error, before the
 *   SDK sees the answer.
 */
import { AGENT_CARD_PATH, TaskState, taskStateToJSON, type AgentCard } from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
  type AgentCardResolver,
  type Client,
} from '@a2a-js/sdk/client';
import {
  A2A_ERROR_CODE,
  PushNotificationNotSupportedError,
  TaskNotFoundError,
  isJsonRpcError,
  isRestError,
} from '@a2a-js/sdk/errors';
import { OutboundError, type OutboundClient } from '../outbound';

export type RemoteFailure =
  | { kind: 'task_not_found' }
  | { kind: 'auth_failed'; status: number }
  | { kind: 'guard_refused'; rule: string }
  | { kind: 'push_not_supported' }
  | { kind: 'transient'; detail: string };

export type RemoteResult<T> = { ok: true; value: T } | { ok: false; failure: RemoteFailure };

export interface RemoteAgentOptions {
  http: OutboundClient;
  /** A2A base URL; the card is read from `${agentUrl}/.well-known/agent-card.json` */
  agentUrl: string;
  /** sent as `Authorization: Bearer` on every call to the agent, the card included */
  bearerToken?: string;
}

export interface RemoteTaskView {
  id: string;
  /** the A2A name, e.g. 'TASK_STATE_WORKING' */
  state: string;
  contextId?: string;
}

export interface RemoteAgent {
  getTask(taskId: string): Promise<RemoteResult<RemoteTaskView>>;
  createPushConfig(
    taskId: string,
    cfg: { id: string; url: string; credentials: string },
  ): Promise<RemoteResult<{ id: string }>>;
  /** a missing config or task counts as ok */
  deletePushConfig(taskId: string, configId: string): Promise<RemoteResult<void>>;
  card(): Promise<RemoteResult<{ pushNotifications: boolean; transports: string[] }>>;
}

export const TERMINAL_STATES: readonly string[] = Object.freeze([
  'TASK_STATE_COMPLETED',
  'TASK_STATE_FAILED',
  'TASK_STATE_CANCELED',
  'TASK_STATE_REJECTED',
]);

export const INTERRUPTED_STATES: readonly string[] = Object.freeze([
  'TASK_STATE_INPUT_REQUIRED',
  'TASK_STATE_AUTH_REQUIRED',
]);

/** The agent answered 401 or 403. Thrown by the fetch wrapper so that every binding reports it alike. */
class AgentAuthRefused extends Error {
  constructor(readonly status: number) {
    super(`the agent answered HTTP ${status}`);
    this.name = 'AgentAuthRefused';
  }
}

type Operation = 'card' | 'getTask' | 'createPushConfig' | 'deletePushConfig';

const MAX_DETAIL = 300;

/** The error and everything it wraps: `cause` chains and AggregateError members. */
function* errorChain(err: unknown, depth = 0): Generator<unknown> {
  if (err === undefined || err === null || depth > 8) return;
  yield err;
  if (err instanceof AggregateError) for (const e of err.errors) yield* errorChain(e, depth + 1);
  if (err instanceof Error && err.cause !== undefined) yield* errorChain(err.cause, depth + 1);
}

function transient(detail: string, token: string | undefined): RemoteFailure {
  // SDK messages can quote the agent's answer; a token echoed back must not leave through them.
  const clean = token ? detail.split(token).join('[redacted]') : detail;
  return {
    kind: 'transient',
    detail: clean.length > MAX_DETAIL ? `${clean.slice(0, MAX_DETAIL)}…` : clean,
  };
}

/** Pure: an error thrown by the SDK client (or our fetch under it) to a RemoteFailure. */
export function classifyRemoteError(err: unknown, op: Operation, token?: string): RemoteFailure {
  for (const e of errorChain(err)) {
    if (e instanceof AgentAuthRefused) return { kind: 'auth_failed', status: e.status };
    if (e instanceof OutboundError) {
      if (e.code === 'guard_refused') return { kind: 'guard_refused', rule: e.rule ?? 'unknown' };
      return transient(`${e.code}${e.detail ? ` (${e.detail})` : ''}: ${e.message}`, token);
    }
  }
  if (
    err instanceof TaskNotFoundError ||
    (isJsonRpcError(err) && err.envelopeCode === A2A_ERROR_CODE.TASK_NOT_FOUND)
  ) {
    return { kind: 'task_not_found' };
  }
  if (
    err instanceof PushNotificationNotSupportedError ||
    (isJsonRpcError(err) && err.envelopeCode === A2A_ERROR_CODE.PUSH_NOTIFICATION_NOT_SUPPORTED)
  ) {
    return { kind: 'push_not_supported' };
  }
  if (isRestError(err)) {
    if (err.statusCode === 401 || err.statusCode === 403)
      return { kind: 'auth_failed', status: err.statusCode };
    // HTTP+JSON binds TaskNotFound to 404; an agent may send it without the ErrorInfo detail.
    if (err.statusCode === 404 && (op === 'getTask' || op === 'deletePushConfig')) {
      return { kind: 'task_not_found' };
    }
    return transient(`HTTP ${err.statusCode} ${err.name}: ${err.message}`, token);
  }
  if (isJsonRpcError(err))
    return transient(`JSON-RPC ${err.envelopeCode} ${err.name}: ${err.message}`, token);
  if (err instanceof Error) return transient(`${err.name}: ${err.message}`, token);
  return transient(`unexpected ${typeof err} thrown`, token);
}

function cardUrlOf(agentUrl: string): string {
  return `${agentUrl.replace(/\/+$/, '')}/${AGENT_CARD_PATH}`;
}

export function connectRemoteAgent(o: RemoteAgentOptions): RemoteAgent {
  const { http, bearerToken } = o;
  const cardUrl = cardUrlOf(o.agentUrl);

  const fetchImpl: OutboundClient['fetch'] = async (input, init) => {
    const headers = new Headers(init?.headers);
    if (bearerToken) headers.set('Authorization', `Bearer ${bearerToken}`);
    const res = await http.fetch(input, { ...init, headers });
    if (res.status === 401 || res.status === 403) {
      await res.body?.cancel().catch(() => undefined);
      throw new AgentAuthRefused(res.status);
    }
    return res;
  };

  const resolver = new DefaultAgentCardResolver({ fetchImpl });
  let seenCard: AgentCard | undefined;
  // Keeps the card the factory resolved (the SDK client holds it privately).
  const capturing: AgentCardResolver = {
    async resolve(baseUrl, path) {
      seenCard = await resolver.resolve(baseUrl, path);
      return seenCard;
    },
    normalizeAgentCard: (card) => resolver.normalizeAgentCard(card),
  };
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
      cardResolver: capturing,
    }),
  );

  let connected: Promise<{ client: Client; card: AgentCard }> | undefined;
  const connect = (): Promise<{ client: Client; card: AgentCard }> => {
    connected ??= (async () => {
      // The full card URL with an empty path: the SDK resolves its relative default path against the
      // base URL, which would drop the base's last segment when it has no trailing slash.
      const client = await factory.createFromUrl(cardUrl, '');
      if (seenCard === undefined) throw new Error('the card resolver returned no card');
      return { client, card: seenCard };
    })();
    // Only a success is cached: a failed card read is retried at the next call.
    connected.catch(() => {
      connected = undefined;
    });
    return connected;
  };

  const attempt = async <T>(op: Operation, fn: (client: Client) => Promise<T>): Promise<RemoteResult<T>> => {
    try {
      const { client } = await connect();
      return { ok: true, value: await fn(client) };
    } catch (err) {
      try {
        return { ok: false, failure: classifyRemoteError(err, op, bearerToken) };
      } catch {
        return { ok: false, failure: { kind: 'transient', detail: 'unclassifiable error' } };
      }
    }
  };

  return {
    getTask: (taskId) =>
      attempt('getTask', async (client) => {
        // historyLength 0: only the state is needed, not the conversation.
        const task = await client.getTask({ tenant: '', id: taskId, historyLength: 0 });
        const view: RemoteTaskView = {
          id: task.id || taskId,
          state: taskStateToJSON(task.status?.state ?? TaskState.TASK_STATE_UNSPECIFIED),
        };
        if (task.contextId) view.contextId = task.contextId;
        return view;
      }),

    createPushConfig: (taskId, cfg) =>
      attempt('createPushConfig', async (client) => {
        const created = await client.createTaskPushNotificationConfig({
          tenant: '',
          id: cfg.id,
          taskId,
          url: cfg.url,
          token: '',
          authentication: { scheme: 'Bearer', credentials: cfg.credentials },
        });
        return { id: created.id || cfg.id };
      }),

    async deletePushConfig(taskId, configId) {
      const r = await attempt('deletePushConfig', async (client) => {
        await client.deleteTaskPushNotificationConfig({ tenant: '', taskId, id: configId });
      });
      // Nothing to delete: the task is gone, or the agent keeps no push configs at all.
      if (!r.ok && (r.failure.kind === 'task_not_found' || r.failure.kind === 'push_not_supported')) {
        return { ok: true, value: undefined };
      }
      return r;
    },

    card: () =>
      attempt('card', async () => {
        const { card } = await connect();
        const transports = [...new Set((card.supportedInterfaces ?? []).map((i) => i.protocolBinding))];
        return { pushNotifications: card.capabilities?.pushNotifications === true, transports };
      }),
  };
}
