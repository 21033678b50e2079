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
import { temporalWorkerTracing } from '../tracing';
import express from 'express';
import { createDeliveryActivities } from '../activities/delivery';
import { EAGER_SLOTS, LocalAttemptClock, workflowSlotSupplier } from './workflow-slots';
import { createRegistrationActivities } from '../activities/registration';
import { parseTargetBounds, requireSettings, workflowTaskPollers, workflowTaskSlots } from '../config';
import { opsRoutes } from '../http/ops';
import { createRegistry } from '../metrics';
import type { OutboundClient } from '../outbound';
import { pgReachable } from '../db/pool';
import { DEFAULT_SLOT_SETTINGS, HostSlots } from '../db/slots';
import type { DueHandoff } from '../delivery/types';
import { wakeDeliveries } from '../starts/client';
import { isUuid } from '../ids';
import { Client } from '@temporalio/client';
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
    // Temporal's OpenTelemetry interceptor names the trace `trace_id`; our lines say `traceId`.
    const { trace_id: traceId, span_id: spanId, trace_flags: _flags, ...meta } = entry.meta ?? {};
    if (traceId !== undefined) Object.assign(meta, { traceId, spanId });
    const ours = meta.sdkComponent === 'workflow';
    if (!ours && entry.level !== 'WARN' && entry.level !== 'ERROR' && !logger.isLevelEnabled('debug')) return;
    const fn = entry.level === 'ERROR' ? 'error' : entry.level === 'WARN' ? 'warn' : ours ? 'info' : 'debug';
    logger[fn]({ ...meta, source: 'temporal' }, entry.message);
  });
}

/** Local activity slots of the main worker: the lean type's attempts on the wire at once, at most. */
const LOCAL_ACTIVITY_SLOTS = 200;

/** The slow lane's task queue: attempts to targets that recently timed out, refused or were slow. */
export const slowLaneOf = (taskQueue: string) => `${taskQueue}-slow`;

export function activitiesFor(
  rt: Runtime,
  httpClient: OutboundClient,
  client: Client,
  due: DueHandoff,
  localAttempts?: LocalAttemptClock,
  eagerStarts?: { done(jobId: string): void },
) {
  const s = requireSettings(rt.settings, ['PUBLIC_BASE_URL']);
  const slots = new HostSlots(rt.db, {
    ...DEFAULT_SLOT_SETTINGS,
    capacity: s.OUTBOUND_HOST_CONCURRENCY,
    byTarget: parseTargetBounds(s.OUTBOUND_HOST_CONCURRENCY_BY_TARGET),
  });
  // Slots are held by delivery attempts (`<jobId>:<n>`) and agent calls (`reg:<id>`): only jobs have a
  // workflow to wake.
  const wake = (holders: string[]) =>
    wakeDeliveries(client, [...new Set(holders.map((h) => h.split(':')[0]!))].filter(isUuid));
  const registration = createRegistrationActivities({
    db: rt.db,
    keyring: rt.keyring,
    http: httpClient,
    logger: rt.logger,
    publicBaseUrl: s.PUBLIC_BASE_URL,
    pollInitialMs: s.POLL_INITIAL,
    pollMaxMs: s.POLL_MAX,
    maxAgeMs: s.REGISTRATION_MAX_AGE,
    slots,
    wake,
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
    slots,
    wake,
    due,
    health: { failingAfterMs: s.CONFIG_FAILING_AFTER, warnAfterMs: s.CONFIG_WARN_AFTER },
    ...(localAttempts ? { localAttempts } : {}),
    ...(eagerStarts ? { eagerStarts } : {}),
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

/**
 * The activity interceptors every worker runs (tests' in-process workers included); with tracing on,
 * Temporal's OpenTelemetry interceptor first, so the activity and its log lines run in its span.
 */
export const activityInterceptors = (logger: Logger): ActivityInterceptorsFactory[] => [
  ...(temporalWorkerTracing()?.activity ?? []),
  activityLogInterceptor(logger),
  heartbeatInterceptor,
];

export const WORKFLOW_INTERCEPTOR_MODULES = [require.resolve('../workflows/interceptors')];

/**
 * The workflow interceptor modules bundled into the workflow code: ours, and Temporal's OpenTelemetry
 * ones only while tracing is on (so a worker without OTEL_* settings bundles and loads none of them).
 * The sinks export the workflow sandbox's spans.
 */
export function workflowTracing(): Pick<WorkerOptions, 'sinks'> & { workflowModules: string[] } {
  const t = temporalWorkerTracing();
  return t
    ? { workflowModules: [...WORKFLOW_INTERCEPTOR_MODULES, ...t.workflowModules], sinks: t.sinks }
    : { workflowModules: WORKFLOW_INTERCEPTOR_MODULES };
}

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

/**
 * A worker process's two Temporal workers: the main one (workflows and activities on TASK_QUEUE) and
 * the slow lane (activities only, on its own queue with SLOW_LANE_CONCURRENCY slots), so attempts to
 * targets that time out can never take the slots healthy targets need.
 */
export class Workers {
  constructor(
    readonly main: Worker,
    readonly slow: Worker,
  ) {}

  static async create(
    rt: Runtime,
    httpClient: OutboundClient,
    o: {
      connection: NativeConnection;
      namespace: string;
      taskQueue: string;
      /** Where the jobs an attempt's end makes due go: this process's relay. */
      due: DueHandoff;
      /** The eager places of this process's relay, given back as a job's attempt call ends. */
      eagerStarts?: { done(jobId: string): void };
      source?: WorkflowSource;
      /** Options of the main worker that differ (tests' in-process workers). */
      main?: Partial<WorkerOptions>;
    },
  ): Promise<Workers> {
    const client = new Client({ connection: o.connection, namespace: o.namespace });
    const wftSlots = workflowTaskSlots(rt.settings);
    // Local attempts are timed, and a run whose attempt hangs stops counting against the slots
    // (src/worker/workflow-slots.ts).
    const clock = new LocalAttemptClock();
    const activities = activitiesFor(rt, httpClient, client, o.due, clock, o.eagerStarts);
    const interceptors = { activity: activityInterceptors(rt.logger) };
    const wf = workflowTracing();
    const main = await Worker.create({
      connection: o.connection,
      namespace: o.namespace,
      taskQueue: o.taskQueue,
      ...(o.source ?? defaultWorkflowSource()),
      activities,
      ...(wf.sinks ? { sinks: wf.sinks } : {}),
      interceptors: { ...interceptors, workflowModules: wf.workflowModules },
      tuner: {
        workflowTaskSlotSupplier: workflowSlotSupplier(
          wftSlots.active,
          wftSlots.hardCap,
          clock,
          undefined,
          o.eagerStarts ? EAGER_SLOTS : 0,
        ),
        activityTaskSlotSupplier: { type: 'fixed-size', numSlots: rt.settings.WORKER_ACTIVITY_SLOTS },
        localActivityTaskSlotSupplier: { type: 'fixed-size', numSlots: LOCAL_ACTIVITY_SLOTS },
        nexusTaskSlotSupplier: { type: 'fixed-size', numSlots: 1 },
      },
      // Half the slots in progress poll the task queue, 2-10 (workflowTaskPollers, src/config.ts).
      workflowTaskPollerBehavior: { type: 'simple-maximum', maximum: workflowTaskPollers(wftSlots.active) },
      // Ratio 1: all of those poll the task queue (5 with the default slots), and the sticky queue gets
      // the SDK's minimum of one more (sdk-core's wft_poller_behavior: task queue max × ratio, sticky the
      // rest, at least 1; the SDK's default 0.2 gives the task queue 1 of 5 and the sticky queue 4); so
      // 6 of the 10 slots poll. A new run's first task waits in the task queue, ordered by the tenant
      // fairness key; a cached run's later tasks wait in the sticky queue, first come. During one
      // tenant's burst the sticky queue always has that tenant's work: with one poller on the task queue,
      // another tenant's new deliveries waited for it (benchmark 9 (d)). The price: under a backlog the
      // sticky queue drains slowly (one poll at a time; sdk-core also holds task queue polls back to one
      // while the sticky queue reports a backlog), and a task left there 10 s moves to the task queue
      // (docs/decisions.md, "the sticky queue's one poller").
      nonStickyToStickyPollRatio: 1,
      // A backlog is thousands of deliveries asleep on timers: each cached run holds memory, and one that
      // wakes after eviction replays its few events. 500 keeps the worker's memory bounded (bench 6).
      maxCachedWorkflows: 500,
      shutdownGraceTime: '20s',
      ...o.main,
    });
    const slow = await Worker.create({
      connection: o.connection,
      namespace: o.namespace,
      taskQueue: slowLaneOf(o.taskQueue),
      activities,
      interceptors,
      maxConcurrentActivityTaskExecutions: rt.settings.SLOW_LANE_CONCURRENCY,
      shutdownGraceTime: '20s',
    });
    return new Workers(main, slow);
  }

  /** Runs both until both stop (a failure of either stops the other). */
  run(): Promise<void> {
    const runs = [this.main.run(), this.slow.run()];
    for (const r of runs) r.catch(() => this.shutdown());
    return Promise.all(runs).then(() => undefined);
  }

  shutdown(): void {
    for (const w of [this.main, this.slow]) if (w.getState() === 'RUNNING') w.shutdown();
  }

  getState() {
    const states = [this.main.getState(), this.slow.getState()];
    return states.every((x) => x === 'RUNNING')
      ? 'RUNNING'
      : (states.find((x) => x !== 'RUNNING') ?? 'STOPPED');
  }
}

/**
 * The worker's own small listener: health, readiness and metrics on WORKER_PORT. Ready: Postgres
 * answers, the worker is running, and the Temporal server answers on the worker's connection.
 */
export function startWorkerListener(
  rt: Runtime,
  worker: () => Pick<Workers, 'getState'> | undefined,
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
