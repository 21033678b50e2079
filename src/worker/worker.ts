import http from 'node:http';
import v8 from 'node:v8';
import {
  DefaultLogger,
  makeTelemetryFilterString,
  NativeConnection,
  Runtime as TemporalRuntime,
  Worker,
  type LogLevel,
  type WorkerOptions,
} from '@temporalio/worker';
import type { ActivityInboundCallsInterceptor, ActivityInterceptorsFactory } from '@temporalio/worker';
import type { Logger } from 'pino';
import { readRequestId, withRequestContext } from '../request-context';
import express from 'express';
import { createDeliveryActivities } from '../activities/delivery';
import { createRegistrationActivities } from '../activities/registration';
import { requireSettings } from '../config';
import { opsRoutes } from '../api/app';
import { createRegistry } from '../metrics';
import type { OutboundClient } from '../outbound';
import { pgReachable } from '../db/pool';
import type { Runtime } from '../runtime';
import { temporalReachable, type ReachableConnection } from '../temporal';

let runtimeInstalled = false;

/** Routes the SDK's own logs into our pino logger; below `debug` only its warnings show. */
export function installTemporalRuntime(logger: Logger): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  const level: LogLevel = logger.isLevelEnabled('debug') ? 'INFO' : 'WARN';
  TemporalRuntime.install({
    logger: temporalLogForwarder(logger),
    telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: level }), forward: {} } },
  });
}

/**
 * The SDK's logger, into pino: our workflows' own lines (with their request id, workflow id and run)
 * at their level; the SDK's internals (bundler, worker state) only as warnings unless at debug.
 */
export function temporalLogForwarder(logger: Logger): DefaultLogger {
  return new DefaultLogger('INFO', (entry) => {
    const meta = entry.meta ?? {};
    const ours = meta.sdkComponent === 'workflow';
    if (!ours && entry.level !== 'WARN' && entry.level !== 'ERROR' && !logger.isLevelEnabled('debug')) return;
    const fn = entry.level === 'ERROR' ? 'error' : entry.level === 'WARN' ? 'warn' : ours ? 'info' : 'debug';
    logger[fn]({ ...meta, source: 'temporal' }, entry.message);
  });
}

export function activitiesFor(rt: Runtime, httpClient: OutboundClient) {
  const s = requireSettings(rt.settings, ['PUBLIC_BASE_URL']);
  const registration = createRegistrationActivities({
    db: rt.db,
    keyring: rt.keyring,
    http: httpClient,
    logger: rt.logger,
    publicBaseUrl: s.PUBLIC_BASE_URL,
    pollInitialMs: s.POLL_INITIAL,
    pollMaxMs: s.POLL_MAX,
    maxAgeMs: s.REGISTRATION_MAX_AGE,
  });
  const delivery = createDeliveryActivities({
    db: rt.db,
    keyring: rt.keyring,
    http: httpClient,
    policy: rt.policy,
    retry: {
      initialMs: s.RETRY_INITIAL,
      factor: s.RETRY_FACTOR,
      maxMs: s.RETRY_MAX,
      maxAttempts: s.DELIVERY_MAX_ATTEMPTS,
    },
    timeoutMs: s.DELIVERY_TIMEOUT,
    logger: rt.logger,
  });
  return { ...delivery, ...registration };
}

/**
 * Cross-cutting, in one place: every activity runs with a logger that carries the request id (from the
 * workflow's header), the workflow id and the activity, and logs its own failure with its duration.
 */
export function activityLogInterceptor(logger: Logger): ActivityInterceptorsFactory {
  return (ctx) => {
    const inbound: ActivityInboundCallsInterceptor = {
      async execute(input, next) {
        const requestId = readRequestId(input.headers);
        const { info } = ctx;
        const log = logger.child({
          ...(requestId ? { requestId } : {}),
          workflowId: info.workflowExecution?.workflowId,
          activity: info.activityType,
          activityAttempt: info.attempt,
        });
        const t0 = performance.now();
        return withRequestContext({ requestId: requestId ?? '', logger: log }, async () => {
          try {
            const r = await next(input);
            log.debug({ durationMs: Math.round(performance.now() - t0) }, 'activity completed');
            return r;
          } catch (err) {
            log.warn(
              { err: (err as Error).message, durationMs: Math.round(performance.now() - t0) },
              'activity failed',
            );
            throw err;
          }
        });
      },
    };
    return { inbound };
  };
}

/**
 * Heartbeats every activity scheduled with a heartbeat timeout while it runs, so that a worker that dies
 * (SIGKILL, OOM) is noticed within that timeout rather than the activity's whole start-to-close timeout.
 * The SDK throttles what it sends to the server.
 */
export const heartbeatInterceptor: ActivityInterceptorsFactory = (ctx) => ({
  inbound: {
    async execute(input, next) {
      const every = ctx.info.heartbeatTimeoutMs ? Math.max(200, ctx.info.heartbeatTimeoutMs / 4) : 0;
      const timer = every > 0 ? setInterval(() => ctx.heartbeat(), every) : undefined;
      try {
        return await next(input);
      } finally {
        if (timer) clearInterval(timer);
      }
    },
  },
});

/** The activity interceptors every worker runs (tests' in-process workers included). */
export const activityInterceptors = (logger: Logger): ActivityInterceptorsFactory[] => [
  activityLogInterceptor(logger),
  heartbeatInterceptor,
];

export const WORKFLOW_INTERCEPTOR_MODULES = [require.resolve('../workflows/interceptors')];

/** The workflow code: a prebuilt bundle in tests, the source path otherwise. */
export type WorkflowSource = Pick<WorkerOptions, 'workflowBundle' | 'workflowsPath'>;

export const defaultWorkflowSource = (): WorkflowSource => ({
  workflowsPath: require.resolve('../workflows'),
});

/**
 * How far V8 lets a heap grow past what the last full GC kept before it collects again, in percent.
 * Left to itself V8 allows up to 4 × when its heap limit is large (it derives from physical memory:
 * 4 GiB on a 24 GiB host), and a worker churning through thousands of short-lived runs fills both its
 * heaps (main and workflow thread) with promoted garbage up to that bound: bench 6 measured main
 * 100 → 300 MB and workflow thread 66 → 310 MB before each full GC, with live memory flat. 50 % keeps
 * each heap near 1.5 × live at the price of more frequent (incremental, mostly concurrent) full GCs.
 */
export const WORKER_HEAP_GROWING_PERCENT = 50;

/**
 * V8 reads this flag each time it sets a heap's next GC limit, in every isolate of the process, so
 * setting it at start covers the main thread and the workflow thread the worker creates next. It is
 * not one Node accepts in NODE_OPTIONS, hence here rather than in the start command.
 */
export function boundHeapGrowth(percent = WORKER_HEAP_GROWING_PERCENT): void {
  v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
}

export async function createWorker(
  rt: Runtime,
  httpClient: OutboundClient,
  o: { connection: NativeConnection; namespace: string; taskQueue: string; source?: WorkflowSource },
): Promise<Worker> {
  return Worker.create({
    connection: o.connection,
    namespace: o.namespace,
    taskQueue: o.taskQueue,
    ...(o.source ?? defaultWorkflowSource()),
    activities: activitiesFor(rt, httpClient),
    interceptors: {
      workflowModules: WORKFLOW_INTERCEPTOR_MODULES,
      activity: activityInterceptors(rt.logger),
    },
    maxConcurrentActivityTaskExecutions: 200,
    // A backlog is thousands of deliveries asleep on timers: each cached run holds memory, and one that
    // wakes after eviction replays its few events. 500 keeps the worker's memory bounded (bench 6).
    maxCachedWorkflows: 500,
    shutdownGraceTime: '20s',
  });
}

/**
 * The worker's own small listener: health, readiness and metrics on WORKER_PORT. Ready: Postgres
 * answers, the worker is running, and the Temporal server answers on the worker's connection.
 */
export function startWorkerListener(
  rt: Runtime,
  worker: () => Worker | undefined,
  port: number,
  connection: ReachableConnection,
): http.Server {
  const registry = createRegistry('worker');
  const app = express();
  app.use(
    opsRoutes(registry, async () => ({
      postgres: await pgReachable(rt.db),
      temporal: worker()?.getState() === 'RUNNING' && (await temporalReachable(connection)),
    })),
  );
  return app.listen(port, '0.0.0.0');
}
