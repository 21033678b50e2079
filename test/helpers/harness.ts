import { attemptPlanOf } from '../../src/delivery/schedule';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import {
  DefaultLogger,
  makeTelemetryFilterString,
  NativeConnection,
  Runtime as TemporalRuntime,
} from '@temporalio/worker';
import { createApiApp } from '../../src/api/app';
import type { ApiDeps } from '../../src/api/context';
import { FeedNotifier } from '../../src/api/feed-notifier';
import { CONFIG_EVENTS_CHANNEL } from '../../src/db/config-events';
import { FEED_CHANNEL } from '../../src/db/registrations';
import { PgListener } from '../../src/db/listen';
import { DELIVERY_WORKFLOW_TYPES, eagerStartClient, type Starter } from '../../src/starts/client';
import { EagerStarts } from '../../src/starts/eager';
import { KnownTargets } from '../../src/starts/known-targets';
import { Relay, relayOf, type RelayOptions } from '../../src/starts/relay';
import type { DueHandoff } from '../../src/delivery/types';
import { createInboxApp } from '../../src/inbox/app';
import { loadSettings } from '../../src/config';
import { createApiKey } from '../../src/db/apikeys';
import { TEMPORAL_TEST_SERVER } from '../../src/embedded/temporal';
import { createRegistry } from '../../src/metrics';
import { compilePolicy, createOutboundClient, type OutboundClient, type Resolver } from '../../src/outbound';
import type { Runtime } from '../../src/runtime';
import { apiGauges, serviceReadiness } from '../../src/services';
import { Keyring } from '../../src/sealing/keyring';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { DEFAULT_SLOT_SETTINGS, targetOf } from '../../src/db/slots';
import type { DeliveryResult } from '../../src/workflows/delivery';
import { activityInterceptors, temporalLogForwarder, Workers } from '../../src/worker/worker';
import { clientInterceptors } from '../../src/temporal';
import { temporalWorkerTracing } from '../../src/tracing';
import { SEARCH_ATTRIBUTES } from '../../src/workflows/search-attributes';
import pino from 'pino';
import type { temporal as proto } from '@temporalio/proto';
import { createTestDb, type TestDb } from './db';
import { makeTestTls } from './tls';

let runtimeInstalled = false;
/** Keeps the Temporal core's own logging to warnings, so test output stays readable. */
export function quietTemporal(forwardTo?: pino.Logger) {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  TemporalRuntime.install({
    logger: forwardTo ? temporalLogForwarder(forwardTo) : new DefaultLogger('ERROR'),
    telemetryOptions: {
      logging: { filter: makeTelemetryFilterString({ core: 'ERROR', other: 'ERROR' }), forward: {} },
    },
  });
}

export async function createTimeSkippingEnv(): Promise<TestWorkflowEnvironment> {
  quietTemporal();
  const env = await TestWorkflowEnvironment.createTimeSkipping({
    server: { executable: { type: 'existing-path', path: TEMPORAL_TEST_SERVER } },
  });
  // The time-skipping server knows no search attributes until told.
  await env.connection.operatorService.addSearchAttributes({
    namespace: 'default',
    searchAttributes: Object.fromEntries(SEARCH_ATTRIBUTES.map((k) => [k.name, 2])),
  });
  return env;
}

export interface StackOptions {
  env: Record<string, string>;
  /** Policy of the API (creation-time checks); defaults to the worker's. */
  apiEnv?: Record<string, string>;
  resolver?: Resolver;
  /** Where the service logs (silent by default). */
  logger?: pino.Logger;
  /** The workflow bundle (default: the global setup's, without tracing interceptors). */
  workflowBundle?: string;
  /** Sees every request the inbox answers, with the headers as they arrived and the answer's status. */
  inboxTap?: (seen: InboxSeen) => void;
  /** How often a long-poll re-reads the feed without a notification (the API's default: 1 s). */
  feedRecheckMs?: number;
  /**
   * The relay on the worker's NativeConnection (as every worker process runs it): fast-lane starts ask
   * to be eager. Off by default: the tests' client is a plain one.
   */
  eager?: boolean;
  /** Where the worker's attempts hand the jobs they make due (default: the stack's relay). */
  handoff?: (relay: Relay) => DueHandoff;
}

export interface InboxSeen {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  status: number;
  at: number;
}

export interface Stack {
  tdb: TestDb;
  rt: Runtime;
  apiUrl: string;
  inboxUrl: string;
  apiKey: string;
  relay: Relay;
  worker: Workers;
  http: OutboundClient;
  /** fetch against the API with the key. */
  api(path: string, init?: RequestInit & { json?: unknown }): Promise<Response>;
  close(): Promise<void>;
}

const silent = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

/**
 * A second relay on a stack's database, for a test of the starts themselves: not started (no sweep, no
 * LISTEN), silent; the test kicks it.
 */
export function sideRelay(
  stack: Stack,
  client: Client,
  taskQueue: string,
  o: Partial<RelayOptions> & { starter?: Partial<Starter> } = {},
): Relay {
  const { starter, ...rest } = o;
  return new Relay({
    db: stack.tdb.db,
    starter: { client, taskQueue, ...starter },
    logger: silent,
    sweepIntervalMs: 3_600_000,
    known: new KnownTargets(stack.tdb.db, { knownMs: DEFAULT_SLOT_SETTINGS.knownMs }),
    health: {
      failingAfterMs: stack.rt.settings.CONFIG_FAILING_AFTER,
      warnAfterMs: stack.rt.settings.CONFIG_WARN_AFTER,
    },
    ...rest,
  });
}

/**
 * The service as a test sees it: a fresh database, the API on a random port (with its dispatcher),
 * and a worker with the real activities, on a given Temporal (time-skipping or the dev server).
 */
export async function startStack(
  temporal: { client: Client; nativeConnection: NativeConnection; namespace?: string },
  taskQueue: string,
  o: StackOptions,
): Promise<Stack> {
  const tls = makeTestTls();
  const tdb = await createTestDb();
  // The inbox listens first (HTTPS with the test certificate), so its URL can be PUBLIC_BASE_URL.
  const inboxServer = https.createServer({ cert: tls.certPem, key: tls.keyPem });
  await new Promise<void>((r) => inboxServer.listen(0, '127.0.0.1', () => r()));
  const inboxUrl = `https://127.0.0.1:${(inboxServer.address() as AddressInfo).port}`;
  const base = {
    OUTBOUND_ALLOW_CIDRS: '127.0.0.0/8',
    LOG_LEVEL: 'silent',
    PUBLIC_BASE_URL: inboxUrl,
    ...o.env,
  };
  const settings = loadSettings({ ...base, TASK_QUEUE: taskQueue, DATABASE_URL: tdb.url });
  const keyring = Keyring.parse(Keyring.generateEntry('test'));
  const policy = compilePolicy(settings.OUTBOUND_ALLOW_CIDRS, settings.OUTBOUND_DENY_CIDRS);
  const logger = o.logger ?? silent;
  const listener = new PgListener(tdb.url, silent);
  const rt: Runtime = { settings, logger, db: tdb.db, keyring, policy, listener };
  const apiSettings = o.apiEnv ? loadSettings({ ...base, ...o.apiEnv, TASK_QUEUE: taskQueue }) : settings;
  const apiPolicy = compilePolicy(apiSettings.OUTBOUND_ALLOW_CIDRS, apiSettings.OUTBOUND_DENY_CIDRS);

  const httpClient = createOutboundClient({
    policy,
    ca: tls.caPem,
    ...(o.resolver ? { resolver: o.resolver } : {}),
  });
  const eager = o.eager ? new EagerStarts() : undefined;
  // The process's relay (src/services.ts: startWorker), on the worker's connection when eager.
  const relay = relayOf(rt, {
    client: eager
      ? eagerStartClient(temporal.nativeConnection, temporal.namespace ?? 'default')
      : temporal.client,
    taskQueue,
    plan: attemptPlanOf(settings),
    ...(eager ? { eager } : {}),
  });
  // The service's own pair of workers (main and slow lane), with the tests' prebuilt workflow bundle.
  const worker = await Workers.create(rt, httpClient, {
    connection: temporal.nativeConnection,
    namespace: temporal.namespace ?? 'default',
    taskQueue,
    due: o.handoff ? o.handoff(relay) : relay,
    ...(eager ? { eagerStarts: eager } : {}),
    // A test that traces gives a bundle with Temporal's OpenTelemetry workflow interceptors in it.
    source: { workflowBundle: { codePath: o.workflowBundle ?? process.env.TEST_WORKFLOW_BUNDLE! } },
    main: {
      ...(temporalWorkerTracing() ? { sinks: temporalWorkerTracing()!.sinks } : {}),
      interceptors: { activity: activityInterceptors(logger) },
    },
  });
  const running = worker.run();

  const feeds = {
    resolutions: new FeedNotifier(listener, FEED_CHANNEL, o.feedRecheckMs),
    configEvents: new FeedNotifier(listener, CONFIG_EVENTS_CHANNEL, o.feedRecheckMs),
  };
  await feeds.resolutions.start();
  await feeds.configEvents.start();
  const deps: ApiDeps = {
    ...rt,
    settings: apiSettings,
    policy: apiPolicy,
    temporal: temporal.client,
    relay,
  };
  // The production checks of /readyz, on this stack's database and Temporal connection.
  const ready = serviceReadiness(tdb.db, temporal.client.connection);
  // The api's registry as a deployment's (src/services.ts: startApi), its gauges included.
  const app = createApiApp({ ...deps, feeds }, createRegistry('api', apiGauges(tdb.db)), ready);
  const inbox = createInboxApp({ ...rt, temporal: temporal.client }, createRegistry('inbox'), ready);
  inboxServer.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const tap = o.inboxTap;
    if (tap) {
      const at = Date.now();
      res.once('finish', () =>
        tap({
          method: req.method ?? '',
          path: req.url ?? '',
          headers: req.headers,
          status: res.statusCode,
          at,
        }),
      );
    }
    inbox.app(req, res);
  });
  const server = http.createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const apiUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  await relay.start();
  const { key } = await createApiKey(tdb.db, 'tenant-a');

  return {
    tdb,
    rt,
    apiUrl,
    inboxUrl,
    apiKey: key,
    relay,
    worker,
    http: httpClient,
    api(path, init = {}) {
      const headers = new Headers(init.headers);
      if (!headers.has('authorization')) headers.set('authorization', `Bearer ${key}`);
      let body = init.body;
      if (init.json !== undefined) {
        body = JSON.stringify(init.json);
        if (!headers.has('content-type')) headers.set('content-type', 'application/json');
      }
      return fetch(`${apiUrl}${path}`, { ...init, headers, body: body ?? null });
    },
    async close() {
      feeds.resolutions.stop();
      feeds.configEvents.stop();
      for (const srv of [server, inboxServer])
        await new Promise<void>((r) => {
          srv.close(() => r());
          srv.closeAllConnections();
        });
      worker.shutdown();
      await running;
      await relay.stop();
      await listener.stop();
      await httpClient.close();
      await tdb.drop();
    },
  };
}

/**
 * A run of the classic delivery workflow (an activity task per attempt) for a job, started as the
 * previous version's dispatcher started it: runs of that type still in flight after an upgrade finish
 * with this version's activities, which is what tests of it check. The stack's relay must be stopped
 * before the job is written (it would start the job as the lean type itself).
 */
export async function startClassicRun(client: Client, taskQueue: string, stack: Stack, jobId: string) {
  await client.workflow.start(DELIVERY_WORKFLOW_TYPES.classic, {
    workflowId: makeDeliveryWorkflowId(jobId),
    taskQueue,
    args: [{ jobId }],
  });
  await stack.tdb.db.query('UPDATE delivery_jobs SET dispatched_at = now() WHERE id = $1', [jobId]);
}

/** Creates a push config through the API and answers its JSON. */
export async function createConfig(
  stack: Stack,
  taskId: string,
  body: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const res = await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs`, { method: 'POST', json: body });
  const json = (await res.json()) as Record<string, unknown>;
  if (res.status !== 201) throw new Error(`create config: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

export async function writeEvent(
  stack: Stack,
  taskId: string,
  streamResponse: unknown,
): Promise<{ eventId: string; deliveries: Array<{ id: string; configId: string }> }> {
  const res = await stack.api(`/v1/tasks/${taskId}/events`, { method: 'POST', json: { streamResponse } });
  const json = (await res.json()) as { eventId: string; deliveries: Array<{ id: string; configId: string }> };
  if (res.status !== 202) throw new Error(`write event: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

/**
 * The state a 2xx from `url`'s target leaves (outbound_targets.healthy_at, migration 016): the lean
 * type then makes its attempts there as local activities. For tests of the lean type's local path
 * whose receiver counts its requests (a warm-up delivery would shift them); test/integration/lean.test.ts
 * goes through the real first delivery.
 */
export async function markTargetAnswered(db: Pick<Runtime['db'], 'query'>, url: string): Promise<void> {
  await db.query(
    `INSERT INTO outbound_targets (target, healthy_at) VALUES ($1, now())
     ON CONFLICT (target) DO UPDATE SET healthy_at = now()`,
    [targetOf(url)],
  );
}

export async function attemptRows(stack: Stack, jobId: string) {
  const r = await stack.tdb.db.query<{
    n: number;
    started_at: Date;
    outcome: string;
    http_status: number | null;
    error: string | null;
  }>(
    'SELECT n, started_at, outcome, http_status, error FROM delivery_attempts WHERE job_id = $1 ORDER BY n',
    [jobId],
  );
  return r.rows;
}

export async function jobRow(stack: Stack, jobId: string) {
  const r = await stack.tdb.db.query<{ status: string; reason: string | null; attempt_count: number }>(
    'SELECT status, reason, attempt_count FROM delivery_jobs WHERE id = $1',
    [jobId],
  );
  return r.rows[0]!;
}

export async function configRow(stack: Stack, taskId: string, id: string) {
  const r = await stack.tdb.db.query<{ status: string; status_reason: string | null }>(
    'SELECT status, status_reason FROM push_configs WHERE task_id = $1 AND id = $2 ORDER BY row_id DESC LIMIT 1',
    [taskId, id],
  );
  return r.rows[0]!;
}

/**
 * The run's Temporal server (the dev server the global setup started, or the real one TEMPORAL_ADDRESS
 * named), as a client and a worker connection.
 */
export async function connectDevServer() {
  quietTemporal();
  const address = process.env.TEST_TEMPORAL_ADDRESS;
  if (!address)
    throw new Error('TEST_TEMPORAL_ADDRESS is not set: run the tests through jest (global setup)');
  const namespace = process.env.TEST_TEMPORAL_NAMESPACE ?? 'default';
  const { Connection, Client } = await import('@temporalio/client');
  const connection = await Connection.connect({ address });
  const client = new Client({
    connection,
    namespace,
    interceptors: { workflow: clientInterceptors() },
  });
  const nativeConnection = await NativeConnection.connect({ address });
  return {
    client,
    nativeConnection,
    namespace,
    async close() {
      await connection.close();
      await nativeConnection.close();
    },
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls until fn answers a value that passes, or fails after timeoutMs. */
export async function eventually<T>(
  fn: () => Promise<T>,
  ok: (v: T) => boolean,
  timeoutMs = 20_000,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (ok(v)) return v;
    if (Date.now() > until)
      throw new Error(`condition not met after ${timeoutMs} ms; last value: ${JSON.stringify(v)}`);
    await sleep(100);
  }
}

/** Answers in tests are checked field by field with expect; their static type adds nothing there. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Json = any;
export const json = async (r: Response | Promise<Response>): Promise<Json> => (await r).json();

/**
 * The result of a workflow, once it has been started (WorkflowNotFound until then: a relay or the inbox
 * starts it); fails when it is still not found after `notFoundForMs`. It waits for the workflow to
 * exist before it asks for the result: on the time-skipping server, asking for a result lets the
 * server skip time, and with nothing running yet it skips years ahead, past every job's deadline.
 */
export async function workflowResult<T = unknown>(
  client: Client,
  workflowId: string,
  notFoundForMs = Infinity,
): Promise<T> {
  const until = Date.now() + notFoundForMs;
  const handle = client.workflow.getHandle(workflowId);
  for (;;) {
    try {
      await handle.describe();
      break;
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError) || Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return (await handle.result()) as T;
}

/** The result of a delivery's workflow, once the dispatcher has started it. */
export const deliveryResult = (client: Client, jobId: string): Promise<DeliveryResult> =>
  workflowResult<DeliveryResult>(client, makeDeliveryWorkflowId(jobId));

type HistoryEvent = proto.api.history.v1.IHistoryEvent;

/** An event's summary as the Web UI shows it (user metadata), or undefined. */
export const summaryOf = (e: HistoryEvent) =>
  e.userMetadata?.summary?.data
    ? (JSON.parse(Buffer.from(e.userMetadata.summary.data).toString()) as string)
    : undefined;

/**
 * Each attempt call as the Web UI's timeline shows it: an activity task (its queue) or a local
 * activity's marker (`local`: the lean type's fast lane), with its summary ("attempt 2 of 8").
 */
export function attemptCalls(events: HistoryEvent[]): Array<{ on: string; summary: string | undefined }> {
  return events.flatMap((e) =>
    e.activityTaskScheduledEventAttributes
      ? [{ on: e.activityTaskScheduledEventAttributes.taskQueue!.name!, summary: summaryOf(e) }]
      : e.markerRecordedEventAttributes?.markerName === 'core_local_activity'
        ? [{ on: 'local', summary: summaryOf(e) }]
        : [],
  );
}
