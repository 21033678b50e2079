/**
 * The two reference-SDK agents behind one shape, for tests that run the same scenario against each:
 * the JS agent of test/helpers/agent.ts (commanded) and the Python agent of python_agent.py.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { SendMessageRequest } from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';
import { Agent, fetch as undiciFetch } from 'undici';
import { startTestAgent, type AgentTaskState } from '../helpers/agent';
import { startPythonAgent } from '../helpers/python';
import { makeTestTls } from '../helpers/tls';

export type PeerKind = 'js' | 'python';
export type Binding = 'JSONRPC' | 'HTTP+JSON';

/** One POST the agent's own push sender made, with the answer it got (status 0: none). */
export interface SentPush {
  url: string;
  body: string;
  status: number;
  /** ms since the epoch */
  at: number;
  answeredAt: number;
}

export interface AgentPeer {
  kind: PeerKind;
  url: string;
  command(taskId: string, state: AgentTaskState): Promise<void>;
  /** the pushes its SDK sender made to this URL, in order */
  pushesTo(url: string): Promise<SentPush[]>;
  /** the A2A methods called on it, in order ('GetTask', 'CreateTaskPushNotificationConfig', …) */
  methods(): Promise<Array<{ method: string; binding: Binding; a2aVersion?: string }>>;
  /** its push store's configs for the task */
  configs(taskId: string): Promise<Array<{ id: string; url: string; scheme?: string; credentials?: string }>>;
  /** what its sender logged about failed pushes */
  senderErrors(): Promise<string[]>;
  close(): Promise<void>;
}

const tlsAgent = new Agent({ connect: { ca: makeTestTls().caPem } });

/** The fetch of the test's own SDK client (nr-llm's role): undici, trusting the test CA. */
const clientFetch = (async (input: string | URL | Request, init?: RequestInit) => {
  const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
  const fromRequest =
    input instanceof Request
      ? { method: input.method, headers: [...input.headers], body: await input.text() }
      : {};
  return undiciFetch(url, {
    ...fromRequest,
    ...(init as Record<string, unknown>),
    dispatcher: tlsAgent,
  } as Parameters<typeof undiciFetch>[1]);
}) as unknown as typeof fetch;

/**
 * As nr-llm does: SendMessage through @a2a-js/sdk's client with returnImmediately, optionally with
 * a push config in SendMessageConfiguration.taskPushNotificationConfig, or as a follow-up to a task
 * waiting for input. Answers the task id.
 */
export async function sendMessage(
  agentUrl: string,
  pushConfig?: Record<string, unknown>,
  /** a follow-up message to this task */
  taskId?: string,
): Promise<string> {
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [
        new JsonRpcTransportFactory({ fetchImpl: clientFetch }),
        new RestTransportFactory({ fetchImpl: clientFetch }),
      ],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl: clientFetch }),
    }),
  );
  const client = await factory.createFromUrl(agentUrl);
  const sent = (await client.sendMessage(
    SendMessageRequest.fromJSON({
      message: {
        messageId: crypto.randomUUID(),
        role: 'ROLE_USER',
        parts: [{ text: taskId ? 'the input you asked for' : 'hello' }],
        ...(taskId ? { taskId } : {}),
      },
      configuration: {
        returnImmediately: true,
        ...(pushConfig ? { taskPushNotificationConfig: pushConfig } : {}),
      },
    }),
  )) as { id?: string };
  if (!sent.id) throw new Error(`SendMessage answered no task: ${JSON.stringify(sent)}`);
  return sent.id;
}

const JS_METHODS: Record<string, string> = {
  getTask: 'GetTask',
  createPushConfig: 'CreateTaskPushNotificationConfig',
  deletePushConfig: 'DeleteTaskPushNotificationConfig',
  sendMessage: 'SendMessage',
};
const bindingOf = (path: string): Binding => (path.startsWith('/a2a/rest') ? 'HTTP+JSON' : 'JSONRPC');

/** An agent on the kind's SDK whose card lists `binding` first (the one our client and the test's use). */
export async function startPeer(kind: PeerKind, binding: Binding = 'JSONRPC'): Promise<AgentPeer> {
  if (kind === 'js') {
    const agent = await startTestAgent({ commanded: true, transport: binding });
    const errors: string[] = [];
    // The JS SDK's sender reports a failed push only through console.error; observed, not replaced.
    const original = console.error;
    console.error = (...args: unknown[]) => {
      const text = args.map((a) => (a instanceof Error ? `${a.name}: ${a.message}` : String(a))).join(' ');
      if (text.includes('push notification')) errors.push(text);
      original.apply(console, args);
    };
    return {
      kind,
      url: agent.url,
      command: (t, s) => agent.command(t, s),
      async pushesTo(url) {
        return agent.pushLog
          .filter((p) => p.url === url)
          .map((p) => ({ url: p.url, body: p.body, status: p.status, at: p.at, answeredAt: p.answeredAt }));
      },
      async methods() {
        return agent.calls
          .filter((c) => c.kind !== 'card')
          .map((c) => ({
            method: c.rpcMethod ?? JS_METHODS[c.kind] ?? 'other',
            binding: bindingOf(c.path),
            ...(c.a2aVersion !== undefined ? { a2aVersion: c.a2aVersion } : {}),
          }));
      },
      async configs(taskId) {
        return agent.pushConfigs(taskId).map((c) => ({
          id: c.id,
          url: c.url,
          ...(c.authentication
            ? { scheme: c.authentication.scheme, credentials: c.authentication.credentials }
            : {}),
        }));
      },
      senderErrors: async () => errors.slice(),
      async close() {
        console.error = original;
        await agent.close();
      },
    };
  }
  const agent = await startPythonAgent({ transport: binding });
  const REST_METHODS: Array<[RegExp, string]> = [
    [/^GET \/a2a\/rest\/tasks\/[^/]+$/, 'GetTask'],
    [/^POST \/a2a\/rest\/tasks\/[^/]+\/pushNotificationConfigs$/, 'CreateTaskPushNotificationConfig'],
    [
      /^DELETE \/a2a\/rest\/tasks\/[^/]+\/pushNotificationConfigs\/[^/]+$/,
      'DeleteTaskPushNotificationConfig',
    ],
    [/^POST \/a2a\/rest\/message:send$/, 'SendMessage'],
  ];
  return {
    kind,
    url: agent.url,
    command: (t, s) => agent.command(t, s),
    async pushesTo(url) {
      return (await agent.pushes()).pushes
        .filter((p) => p.url === url)
        .map((p) => ({
          url: p.url,
          body: p.body,
          status: p.status ?? 0,
          at: p.at * 1000,
          answeredAt: (p.answeredAt ?? p.at) * 1000,
        }));
    },
    async methods() {
      return (await agent.calls())
        .filter((c) => c.path !== '/.well-known/agent-card.json')
        .map((c) => ({
          method:
            c.rpcMethod ?? REST_METHODS.find(([re]) => re.test(`${c.method} ${c.path}`))?.[1] ?? 'other',
          binding: bindingOf(c.path),
          ...(c.a2aVersion !== null ? { a2aVersion: c.a2aVersion } : {}),
        }));
    },
    async configs(taskId) {
      return (await agent.configs(taskId)).map((c) => ({
        id: c.id,
        url: c.url,
        ...(c.scheme ? { scheme: c.scheme, credentials: c.credentials } : {}),
      }));
    },
    async senderErrors() {
      return (await agent.pushes()).logs
        .filter((l) => l.level === 'ERROR')
        .map((l) => `${l.message}${l.exception ? ` (${l.exception})` : ''}`);
    },
    close: () => agent.close(),
  };
}

/** Measurements the interop tests make, written to test-output/interop/ for docs/interop.md. */
export function writeMeasurements(name: string, data: unknown): void {
  const dir = path.resolve(__dirname, '..', '..', 'test-output', 'interop');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, `${name}.json`), `${JSON.stringify(data, null, 2)}\n`);
}

export async function closeClientFetch(): Promise<void> {
  await tlsAgent.close();
}
