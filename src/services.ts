import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { NativeConnection } from '@temporalio/worker';
import { Gauge, type Metric } from 'prom-client';
import { createApiApp } from './api/app';
import { FeedNotifier } from './api/feed-notifier';
import { CONFIG_EVENTS_CHANNEL } from './db/config-events';
import { FEED_CHANNEL } from './db/registrations';
import { requireSettings } from './config';
import { pgReachable, type Db } from './db/pool';
import { attemptPlanOf } from './delivery/schedule';
import type { Probe } from './http/ops';
import { closeServer, listen, trackConnections } from './http/server';
import { createInboxApp } from './inbox/app';
import { createRegistry } from './metrics';
import { startRetentionTimer } from './retention';
import { createHttp, type Runtime } from './runtime';
import { eagerStartClient } from './starts/client';
import { EagerStarts } from './starts/eager';
import { heldCount, queuedCount } from './starts/outbox';
import { relayOf, type Relay } from './starts/relay';
import { connectTemporal, temporalReachable, type ReachableConnection } from './temporal';
import { shutdownTracing } from './tracing';
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

/** /readyz of the api and the inbox: Postgres and Temporal reachable. */
export const serviceReadiness =
  (db: Db, temporal: ReachableConnection): Probe =>
  async () => ({
    postgres: await pgReachable(db),
    temporal: await temporalReachable(temporal),
  });

/**
 * The api. `beside`: a worker running in this process (npm start, `main.ts api,worker`): its relay
 * starts this api's jobs too, eagerly on that worker's connection. Everything else (readiness, signals,
 * the API's own Temporal calls) stays on the api's lazy connection, so the api answers while Temporal
 * is away.
 */
export async function startApi(
  rt: Runtime,
  beside?: { relay: Relay },
): Promise<Service & { relay: Relay; port: number }> {
  // PUBLIC_BASE_URL: embedded registrations hand out callback URLs built on it.
  const s = requireSettings(rt.settings, ['TEMPORAL_ADDRESS', 'PUBLIC_BASE_URL']);
  const { client, connection } = connectTemporal({
    address: s.TEMPORAL_ADDRESS,
    namespace: s.TEMPORAL_NAMESPACE,
    taskQueue: s.TASK_QUEUE,
  });
  // Without a worker beside it: its own relay, on its lazy client, never eager.
  const relay = beside?.relay ?? relayOf(rt, { client, taskQueue: s.TASK_QUEUE, plan: attemptPlanOf(s) });
  const registry = createRegistry('api', apiGauges(rt.db));
  const feeds = {
    resolutions: new FeedNotifier(rt.listener, FEED_CHANNEL),
    configEvents: new FeedNotifier(rt.listener, CONFIG_EVENTS_CHANNEL),
  };
  await feeds.resolutions.start();
  await feeds.configEvents.start();
  const app = createApiApp(
    { ...rt, temporal: client, relay, feeds },
    registry,
    serviceReadiness(rt.db, connection),
  );
  const server = trackConnections(http.createServer(app));
  const port = await listen(server, s.API_PORT);
  if (!beside) await relay.start();
  const retention = startRetentionTimer(rt.db, s.RETENTION, rt.logger);
  return {
    name: 'api',
    url: `http://127.0.0.1:${port}`,
    port,
    relay,
    async stop() {
      retention.stop();
      // Long-polls answer what they have at once, so they do not hold the shutdown up.
      feeds.resolutions.stop();
      feeds.configEvents.stop();
      await closeServer(server);
      if (!beside) await relay.stop();
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

/**
 * The worker, and its process's relay: on the worker's NativeConnection, so that a fast-lane start asks
 * to be eager (its first workflow task comes back in the start's answer, to this worker).
 */
export async function startWorker(
  rt: Runtime,
  source?: WorkflowSource,
): Promise<Service & { run: Promise<void>; connection: NativeConnection; relay: Relay }> {
  const s = requireSettings(rt.settings, ['TEMPORAL_ADDRESS']);
  installTemporalRuntime(rt.logger);
  boundHeapGrowth();
  const connection = await NativeConnection.connect({ address: s.TEMPORAL_ADDRESS });
  const eager = new EagerStarts();
  const relay = relayOf(rt, {
    client: eagerStartClient(connection, s.TEMPORAL_NAMESPACE),
    taskQueue: s.TASK_QUEUE,
    plan: attemptPlanOf(s),
    eager,
  });
  const httpClient = createHttp(rt);
  const worker = await Workers.create(rt, httpClient, {
    connection,
    namespace: s.TEMPORAL_NAMESPACE,
    taskQueue: s.TASK_QUEUE,
    due: relay,
    eagerStarts: eager,
    ...(source ? { source } : {}),
  });
  const listener = trackConnections(startWorkerListener(rt, () => worker, s.WORKER_PORT, connection));
  const run = worker.run();
  await relay.start();
  return {
    name: 'worker',
    url: `http://127.0.0.1:${s.WORKER_PORT}`,
    run,
    connection,
    relay,
    async stop() {
      worker.shutdown();
      await run.catch(() => undefined);
      // After the worker drained: the jobs its last attempts made due are started first.
      await relay.stop();
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
    countGauge('a2a_push_outbox_queued', 'Due delivery jobs whose workflow has not started yet', () =>
      queuedCount(db),
    ),
    countGauge(
      'a2a_push_outbox_held',
      "Delivery jobs held back on purpose: waiting for an earlier job of their config (DELIVERY_ORDER=per_config), or first contacts waiting for their tenant's turn",
      () => heldCount(db),
    ),
    countGauge('a2a_push_inbox_unprocessed', 'Inbox callbacks stored and not yet reconciled', unprocessed),
  ];
}
