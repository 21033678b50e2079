import { attemptPlanOf } from './delivery/schedule';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { NativeConnection } from '@temporalio/worker';
import { Gauge, type Metric } from 'prom-client';
import { createApiApp, type Probe } from './api/app';
import { Dispatcher, heldCount, queuedCount } from './api/dispatcher';
import { KnownTargets } from './api/known-targets';
import { DEFAULT_SLOT_SETTINGS } from './db/slots';
import { FeedNotifier } from './api/feed-notifier';
import { createInboxApp } from './inbox/app';
import { requireSettings } from './config';
import { pgReachable, type Db } from './db/pool';
import { temporalReachable, type ReachableConnection } from './temporal';
import { createRegistry } from './metrics';
import { createHttp, type Runtime } from './runtime';
import { connectTemporal, eagerStartClient } from './temporal';
import type { EagerStarts } from './worker/eager-starts';
import { shutdownTracing } from './tracing';
import { startRetentionTimer } from './retention';
import {
  boundHeapGrowth,
  Workers,
  installTemporalRuntime,
  startWorkerListener,
  type WorkflowSource,
} from './worker/worker';

export interface Service {
  name: string;
  url?: string;
  stop(): Promise<void>;
}

const listen = (server: http.Server, port: number) =>
  new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '0.0.0.0', () => resolve((server.address() as AddressInfo).port));
  });

const closing = new WeakSet<http.Server>();
const openResponses = new WeakMap<http.Server, Set<http.ServerResponse>>();

/**
 * Tracks a listener's open responses so that a shutdown can end keep-alive connections: without it a
 * client that keeps reusing one connection would keep the server (and the process) alive.
 */
function trackConnections<S extends http.Server>(server: S): S {
  const open = new Set<http.ServerResponse>();
  openResponses.set(server, open);
  // Prepended, so it runs before the app answers.
  server.prependListener('request', (_req: http.IncomingMessage, res: http.ServerResponse) => {
    if (closing.has(server)) res.setHeader('Connection', 'close');
    open.add(res);
    res.once('close', () => open.delete(res));
  });
  return server;
}

/** Stops accepting, lets in-flight requests finish (each then closes its connection), closes idle sockets. */
const closeServer = (server: http.Server) =>
  new Promise<void>((resolve) => {
    closing.add(server);
    for (const res of openResponses.get(server) ?? [])
      if (!res.headersSent) res.setHeader('Connection', 'close');
    server.close(() => resolve());
    server.closeIdleConnections();
    // Responses in flight now answer with Connection: close, then their sockets go idle and close.
    const sweep = setInterval(() => server.closeIdleConnections(), 100);
    server.once('close', () => clearInterval(sweep));
  });

/** /readyz of the api and the inbox: Postgres and Temporal reachable. */
export const serviceReadiness =
  (db: Db, temporal: ReachableConnection): Probe =>
  async () => ({
    postgres: await pgReachable(db),
    temporal: await temporalReachable(temporal),
  });

/**
 * The api. `beside`: a worker of the same task queue running in this process (npm start, `main.ts
 * api,worker`): with EAGER_START on, the dispatcher starts delivery workflows on that worker's
 * NativeConnection and asks for eager start (the first workflow task comes back in the start's answer
 * and runs on that worker, with no trip through Temporal's matching). Everything else (readiness,
 * signals, the API's own Temporal calls) stays on the api's lazy connection, so the api answers while
 * Temporal is away.
 */
export async function startApi(
  rt: Runtime,
  beside?: { connection: NativeConnection; eagerStarts?: EagerStarts },
): Promise<Service & { dispatcher: Dispatcher; port: number }> {
  // PUBLIC_BASE_URL: embedded registrations hand out callback URLs built on it.
  const s = requireSettings(rt.settings, ['TEMPORAL_ADDRESS', 'PUBLIC_BASE_URL']);
  const { client, connection } = connectTemporal({
    address: s.TEMPORAL_ADDRESS,
    namespace: s.TEMPORAL_NAMESPACE,
    taskQueue: s.TASK_QUEUE,
  });
  const eager = beside !== undefined && s.EAGER_START === 'on';
  const dispatcher = new Dispatcher({
    db: rt.db,
    client: eager ? eagerStartClient(beside.connection, s.TEMPORAL_NAMESPACE) : client,
    eager,
    ...(eager && beside.eagerStarts ? { eagerStarts: beside.eagerStarts } : {}),
    taskQueue: s.TASK_QUEUE,
    logger: rt.logger,
    sweepIntervalMs: s.SWEEP_INTERVAL,
    slowStartRate: s.SLOW_LANE_START_RATE,
    heldStartRate: s.HELD_START_RATE,
    knownTargets: new KnownTargets(rt.db, { knownMs: DEFAULT_SLOT_SETTINGS.knownMs }),
    workflow: s.DELIVERY_WORKFLOW,
    plan: attemptPlanOf(s),
  });
  const registry = createRegistry('api', apiGauges(rt.db));
  const feed = new FeedNotifier(requireSettings(rt.settings, ['DATABASE_URL']).DATABASE_URL, rt.logger);
  await feed.start();
  const app = createApiApp(
    { ...rt, temporal: client, dispatcher, feed },
    registry,
    serviceReadiness(rt.db, connection),
  );
  const server = trackConnections(http.createServer(app));
  const port = await listen(server, s.API_PORT);
  dispatcher.start();
  const retention = startRetentionTimer(rt.db, s.RETENTION, rt.logger);
  return {
    name: 'api',
    url: `http://127.0.0.1:${port}`,
    port,
    dispatcher,
    async stop() {
      retention.stop();
      // Long-polls answer what they have at once, so they do not hold the shutdown up.
      const closed = closeServer(server);
      await feed.stop();
      await closed;
      await dispatcher.stop();
      await connection.close().catch(() => undefined);
    },
  };
}

export async function startInbox(rt: Runtime): Promise<Service & { port: number }> {
  const s = requireSettings(rt.settings, ['TEMPORAL_ADDRESS']);
  const { client, connection } = connectTemporal({
    address: s.TEMPORAL_ADDRESS,
    namespace: s.TEMPORAL_NAMESPACE,
    taskQueue: s.TASK_QUEUE,
  });
  const registry = createRegistry('inbox');
  const { app } = createInboxApp({ ...rt, temporal: client }, registry, serviceReadiness(rt.db, connection));
  const server =
    s.INBOX_TLS_CERT && s.INBOX_TLS_KEY
      ? https.createServer(
          { cert: fs.readFileSync(s.INBOX_TLS_CERT), key: fs.readFileSync(s.INBOX_TLS_KEY) },
          app,
        )
      : http.createServer(app);
  trackConnections(server);
  const port = await listen(server, s.INBOX_PORT);
  return {
    name: 'inbox',
    url: `${s.INBOX_TLS_CERT ? 'https' : 'http'}://127.0.0.1:${port}`,
    port,
    async stop() {
      await closeServer(server);
      await connection.close().catch(() => undefined);
    },
  };
}

export async function startWorker(
  rt: Runtime,
  source?: WorkflowSource,
): Promise<Service & { run: Promise<void>; connection: NativeConnection; eagerStarts?: EagerStarts }> {
  const s = requireSettings(rt.settings, ['TEMPORAL_ADDRESS']);
  installTemporalRuntime(rt.logger);
  boundHeapGrowth();
  const connection = await NativeConnection.connect({ address: s.TEMPORAL_ADDRESS });
  const httpClient = createHttp(rt);
  const worker = await Workers.create(rt, httpClient, {
    connection,
    namespace: s.TEMPORAL_NAMESPACE,
    taskQueue: s.TASK_QUEUE,
    ...(source ? { source } : {}),
  });
  const listener = trackConnections(startWorkerListener(rt, () => worker, s.WORKER_PORT, connection));
  const run = worker.run();
  return {
    name: 'worker',
    url: `http://127.0.0.1:${s.WORKER_PORT}`,
    run,
    connection,
    ...(worker.eagerStarts ? { eagerStarts: worker.eagerStarts } : {}),
    async stop() {
      worker.shutdown();
      await run.catch(() => undefined);
      await closeServer(listener);
      await httpClient.close();
      await connection.close();
    },
  };
}

/** SIGTERM/SIGINT: stop every service in order, then exit 0. */
export function stopOnSignals(services: () => Service[], after: () => Promise<void> = async () => undefined) {
  let stopping = false;
  const stop = async (sig: string) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`a2a-push: ${sig} received, stopping…\n`);
    for (const svc of services())
      await svc.stop().catch((e: unknown) => process.stderr.write(`${svc.name}: ${String(e)}\n`));
    // The spans still buffered go out before the exit.
    await shutdownTracing();
    await after();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

/** The api's gauges, read from Postgres at each scrape (contract §7): -1 when the read fails. */
export function apiGauges(db: Db): Metric[] {
  const countGauge = (name: string, help: string, count: () => Promise<number>) =>
    new Gauge({
      name,
      help,
      registers: [],
      async collect() {
        this.set(await count().catch(() => -1));
      },
    });
  const unprocessed = async () => {
    const r = await db.query<{ n: string }>(
      'SELECT count(*) AS n FROM inbox_callbacks WHERE processed_at IS NULL',
    );
    return Number(r.rows[0]!.n);
  };
  return [
    countGauge('a2a_push_outbox_queued', 'Delivery jobs committed whose workflow has not started yet', () =>
      queuedCount(db),
    ),
    countGauge(
      'a2a_push_outbox_held',
      'Delivery jobs held back on purpose: queued behind an earlier job of their config (DELIVERY_ORDER=per_config), or not started until their turn (SLOW_LANE_START_RATE, HELD_START_RATE)',
      () => heldCount(db),
    ),
    countGauge('a2a_push_inbox_unprocessed', 'Inbox callbacks stored and not yet reconciled', unprocessed),
  ];
}
