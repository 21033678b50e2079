import { Client, Connection } from '@temporalio/client';
import { temporal as temporalProto } from '@temporalio/proto';
import path from 'node:path';
import { Client as PgClient } from 'pg';
import { makeDeliveryWorkflowId } from '../src/ids';
import { ApiClient, eventPlan } from './lib/api';
import type { Benchmark, BenchContext } from './lib/context';
import {
  startBenchPostgres,
  freshDatabase,
  scratchDir,
  type DeliveryOrder,
  spawnBenchProcess,
  startServices,
  type Services,
} from './lib/stack';
import { sequenceCheck, startBenchReceiver, type BenchReceiver, type SequenceCheck } from './lib/receiver';
import { figure, latencyRows, type BenchResult, type ChartRow } from './lib/report';
import { runDirectSender } from './lib/senders';
import { cpuSeconds, latency, pool, postgresCpuSeconds, ratio, round, type Latency } from './lib/util';

export interface DeliveryThroughputOptions {
  /** Temporal frontend host:port (the run's dev server, or an external cluster). */
  temporalAddress: string;
  namespace?: string;
  /** Worker processes (1 or 2). */
  workers?: number;
  /** Events (one delivery each): default 1,000. */
  n?: number;
  /** Tasks with one push config each: default 100 (so no job is superseded). */
  tasks?: number;
  /** Event writes in flight: default 32. */
  concurrency?: number;
  /** The Temporal server's pid, to report its CPU (optional). */
  serverPid?: number;
  /** More CPU meters (seconds used so far), reported as cores over the run: e.g. a cluster's processes and its Postgres. */
  cpuOf?: Record<string, () => number>;
  /** Postgres for the service; a fresh embedded one in a scratch dir when absent. */
  databaseUrl?: string;
  /** The HTTPS push target; a fresh one when absent. */
  receiver?: BenchReceiver;
  /** Extra settings for the service processes. */
  env?: Record<string, string>;
  /** Services already started (the benchmark then does not start or stop them). */
  services?: Services;
  timeoutMs?: number;
  /**
   * Report a shortfall instead of throwing: when `timeoutMs` passes (or an event write fails), the
   * result counts what the receiver accepted (`delivered`) and the rates cover those events only.
   */
  partial?: boolean;
}

export interface DeliveryThroughputResult {
  /** Prefix of the run's task ids (`<runId>-task-<i>`) and event ids (`<runId>-<i>`). */
  runId: string;
  n: number;
  /** Events the receiver answered 2xx to by the end of the run (n unless `partial`). */
  delivered: number;
  /** Event writes the api did not accept after its retries (0 unless `partial`: otherwise the run throws). */
  writeFailures: number;
  /** 503 answers to event writes (the database pool busy), each retried after its Retry-After. */
  writeRefusals: number;
  workers: number;
  deliveriesPerSec: number;
  /** First event write sent → last POST the receiver accepted. */
  elapsedMs: number;
  /** First event write sent → every write answered. */
  writesMs: number;
  /** First event write sent → the CPU meters read: `cpu` is CPU seconds over this window. */
  cpuWindowMs: number;
  /** event write sent → POST seen by the receiver */
  latencyMs: Latency;
  /** Average cores used during the run: each worker process, the api, and the server when its pid is known. */
  cpu: {
    workers: number[];
    workersTotal: number;
    api: number;
    server?: number;
    more: Record<string, number>;
  };
  /**
   * CPU ms per delivered event of everything measured (workers, api, server, `cpuOf`'s meters: the
   * whole stack when those include Postgres).
   */
  cpuMsPerDelivery: number;
  /** POSTs beyond the first per event (the receiver answers 200 to all). */
  duplicates: number;
  /** Calls that waited in line for a host slot (the workers' a2a_push_host_slot_waits_total). */
  slotWaits: number;
  /** The workers' relays' starts (a2a_push_starts_total) by path, and how many of them were eager. */
  starts: { direct: number; claim: number; eager: number };
  /** Mean time an attempt held its host slot (a2a_push_host_slot_held_seconds), ms. */
  slotHeldMs: number;
  /** What the receiver saw of each config's X-A2A-Push-Sequence: resends, arrivals out of order, gaps. */
  order: SequenceCheck;
  /** Where a delivery's time went, from the service's own rows (p50 ms): the profile of the run. */
  stages?: Record<string, number>;
  /** Attempts without a 2xx, by `outcome/error`, and the 3 slowest jobs by stage (see runTail). */
  tail?: { notDelivered: Record<string, number>; slowest: string[] };
}

/**
 * A counter's total over the worker processes' /metrics (e.g. a2a_push_host_slot_waits_total: calls
 * that found the receiver's host at OUTBOUND_HOST_CONCURRENCY and waited in line, each costing the
 * workflow a wake signal and another workflow task).
 */
export async function workerCounter(services: Services, name: string): Promise<number> {
  let total = 0;
  for (const w of services.workers) {
    const text = await (await fetch(`${w.url}/metrics`)).text();
    for (const line of text.split('\n'))
      if (line.startsWith(name) && !line.startsWith('#')) total += Number(line.split(' ').pop());
  }
  return total;
}

/** p50 of each stage of the run's jobs: write → workflow started, → attempt started, attempt, → finished. */
export async function stageBreakdown(databaseUrl: string, runId: string): Promise<Record<string, number>> {
  const c = new PgClient({ connectionString: databaseUrl });
  await c.connect();
  try {
    const r = await c.query<Record<string, number>>(
      `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM j.dispatched_at - j.created_at) * 1000) AS "write→dispatched",
              percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - j.dispatched_at) * 1000) AS "dispatched→attempt",
              percentile_cont(0.5) WITHIN GROUP (ORDER BY a.duration_ms) AS "attempt POST",
              percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM j.finished_at - a.started_at) * 1000) AS "attempt→finished"
         FROM delivery_jobs j JOIN delivery_attempts a ON a.job_id = j.id AND a.n = 1
        WHERE j.task_id LIKE $1`,
      [`${runId}-%`],
    );
    return Object.fromEntries(Object.entries(r.rows[0] ?? {}).map(([k, v]) => [k, round(Number(v))]));
  } finally {
    await c.end();
  }
}

/**
 * The run's tail: its attempts that did not deliver, by outcome and error (each such job waited a
 * retry's backoff, RETRY_INITIAL 30 s), and its 3 slowest jobs, write → finished, by stage: write →
 * dispatched, → first attempt, → finished (ms), attempts, whether a turn held it back (start_after), and
 * (with `temporal`) how many of its workflow tasks timed out.
 */
export async function runTail(
  databaseUrl: string,
  runId: string,
  temporal?: { address: string; namespace?: string },
): Promise<{ notDelivered: Record<string, number>; slowest: string[] }> {
  const c = new PgClient({ connectionString: databaseUrl });
  await c.connect();
  try {
    const r = await c.query<{ what: string; n: string }>(
      `SELECT coalesce(a.outcome, 'on the wire') || '/' || coalesce(a.error, a.http_status::text, '') AS what,
              count(*) AS n
         FROM delivery_jobs j JOIN delivery_attempts a ON a.job_id = j.id
        WHERE j.task_id LIKE $1 AND a.outcome IS DISTINCT FROM 'delivered'
        GROUP BY 1 ORDER BY 1`,
      [`${runId}-%`],
    );
    const slow = await c.query<{
      id: string;
      total: number;
      w: number;
      d: number;
      f: number;
      n: number;
      turn: boolean;
    }>(
      `SELECT j.id, round(extract(epoch FROM j.finished_at - j.created_at) * 1000) AS total,
              round(extract(epoch FROM j.dispatched_at - j.created_at) * 1000) AS w,
              round(extract(epoch FROM first.started_at - j.dispatched_at) * 1000) AS d,
              round(extract(epoch FROM j.finished_at - first.started_at) * 1000) AS f,
              j.attempt_count AS n, j.start_after IS NOT NULL AS turn
         FROM delivery_jobs j JOIN delivery_attempts first ON first.job_id = j.id AND first.n = 1
        WHERE j.task_id LIKE $1 ORDER BY j.finished_at - j.created_at DESC LIMIT 3`,
      [`${runId}-%`],
    );
    const timedOut = temporal
      ? await workflowTaskTimeouts(
          temporal,
          slow.rows.map((x) => x.id),
        )
      : [];
    return {
      notDelivered: Object.fromEntries(r.rows.map((x) => [x.what, Number(x.n)])),
      slowest: slow.rows.map(
        (x, i) =>
          `${x.total} ms (${x.w} / ${x.d} / ${x.f}, ${x.n} attempt${x.n === 1 ? '' : 's'}${x.turn ? ', held for a turn' : ''}${timedOut[i] ? `, ${timedOut[i]}` : ''})`,
      ),
    };
  } finally {
    await c.end();
  }
}

const { TimeoutType } = temporalProto.api.enums.v1;

/**
 * How many workflow tasks of each job's workflow timed out, and how, in words (0: none); undefined
 * where the history could not be read. Read from the histories, for the run's slowest jobs only.
 * - start-to-close: a worker took the task and never answered it (temporalio/temporal#11733's lost
 *   task): the run waited the workflow task timeout (20 s under lean) before another try; named with
 *   how the run started (its first task handed to the worker in the eager start's answer, or through
 *   matching).
 * - schedule-to-start: the task waited in the worker's sticky queue for 10 s (the SDK's
 *   stickyQueueScheduleToStartTimeout) without a poll taking it, then moved to the task queue.
 */
async function workflowTaskTimeouts(
  temporal: { address: string; namespace?: string },
  jobIds: string[],
): Promise<Array<string | 0 | undefined>> {
  if (jobIds.length === 0) return [];
  const connection = await Connection.connect({ address: temporal.address });
  try {
    const client = new Client({ connection, namespace: temporal.namespace ?? 'default' });
    return await Promise.all(
      jobIds.map(async (id) => {
        try {
          const h = await client.workflow.getHandle(makeDeliveryWorkflowId(id)).fetchHistory();
          const events = h.events ?? [];
          const count = (type: number) =>
            events.filter((e) => e.workflowTaskTimedOutEventAttributes?.timeoutType === type).length;
          const tasks = (n: number) => `${n} workflow task${n === 1 ? '' : 's'}`;
          const eager = events[0]?.workflowExecutionStartedEventAttributes?.eagerExecutionAccepted === true;
          const lost = count(TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE);
          const sticky = count(TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START);
          const words: string[] = [];
          if (lost > 0)
            words.push(
              `${tasks(lost)} timed out start-to-close (${eager ? 'eager start' : 'started through matching'})`,
            );
          if (sticky > 0) words.push(`${tasks(sticky)} waited 10 s in the sticky queue`);
          return words.length > 0 ? words.join(', ') : 0;
        } catch {
          return undefined;
        }
      }),
    );
  } finally {
    await connection.close();
  }
}

/**
 * N events through `POST /v1/tasks/{taskId}/events`, until the HTTPS receiver has seen every POST.
 * Starts api, inbox and worker processes of its own unless `services` is given; reusable against any
 * Temporal address (the real-cluster benchmark calls it with 1 or 2 workers).
 */
export async function runDeliveryThroughput(o: DeliveryThroughputOptions): Promise<DeliveryThroughputResult> {
  const n = o.n ?? 1000;
  const taskCount = o.tasks ?? 100;
  const cleanups: Array<() => Promise<unknown>> = [];
  try {
    const dir = scratchDir();
    let databaseUrl = o.databaseUrl;
    if (!databaseUrl && !o.services) {
      const pg = await startBenchPostgres(dir);
      cleanups.unshift(() => pg.stop());
      databaseUrl = await freshDatabase(pg);
    }
    let receiver = o.receiver;
    if (!receiver) {
      receiver = await startBenchReceiver();
      const r = receiver;
      cleanups.unshift(() => r.close());
    }
    let services = o.services;
    if (!services) {
      services = await startServices({
        dir,
        databaseUrl: databaseUrl!,
        temporalAddress: o.temporalAddress,
        ...(o.namespace ? { namespace: o.namespace } : {}),
        caFile: receiver.tls.caFile,
        workers: o.workers ?? 1,
        ...(o.env ? { env: o.env } : {}),
        start: { inbox: false },
      });
      const s = services;
      cleanups.unshift(() => s.stop());
    }
    const api = new ApiClient(services.api.url, services.apiKey);
    cleanups.unshift(() => api.close());
    const runId = `d${Date.now().toString(36)}`;
    const tasks = Array.from({ length: taskCount }, (_, i) => `${runId}-task-${i}`);
    await api.createConfigs(tasks, 1, receiver.url);
    const plan = eventPlan(n, tasks, runId);
    const sentAt = new Map<string, number>();
    const pids = {
      workers: services.workers.map((w) => w.pid),
      api: services.api.pid,
      ...(o.serverPid ? { server: o.serverPid } : {}),
    };
    const cpu0 = {
      workers: pids.workers.map(cpuSeconds),
      api: cpuSeconds(pids.api),
      server: pids.server ? cpuSeconds(pids.server) : 0,
      more: Object.fromEntries(Object.entries(o.cpuOf ?? {}).map(([k, f]) => [k, f()])),
    };
    const t0 = Date.now();
    let writeFailures = 0;
    let writeRefusals = 0;
    await pool(plan, o.concurrency ?? 32, async (e) => {
      sentAt.set(e.id, Date.now());
      try {
        writeRefusals += await api.postEventRetrying(e.taskId, e.id);
      } catch (err) {
        if (!o.partial) throw err;
        writeFailures++;
      }
    });
    const writesMs = Date.now() - t0;
    try {
      await receiver.waitForAll(
        plan.map((e) => e.id),
        o.timeoutMs ?? Math.max(120_000, n * 200),
      );
    } catch (err) {
      if (!o.partial) throw err;
    }
    const arrived = plan.filter((e) => receiver.delivered.has(e.id));
    const last = arrived.length > 0 ? Math.max(...arrived.map((e) => receiver.delivered.get(e.id)!)) : t0;
    const elapsedMs = last - t0;
    const cpuWindowMs = Date.now() - t0;
    const secs = cpuWindowMs / 1000;
    const workerCpu = pids.workers.map((p, i) => round((cpuSeconds(p) - cpu0.workers[i]!) / secs, 2));
    const cpu = {
      workers: workerCpu,
      workersTotal: round(
        workerCpu.reduce((a, b) => a + b, 0),
        2,
      ),
      // Layout `combined`: the api runs in the first worker's process, counted there.
      api: pids.workers.includes(pids.api) ? 0 : round((cpuSeconds(pids.api) - cpu0.api) / secs, 2),
      ...(pids.server ? { server: round((cpuSeconds(pids.server) - cpu0.server) / secs, 2) } : {}),
      more: Object.fromEntries(
        Object.entries(o.cpuOf ?? {}).map(([k, f]) => [k, round((f() - cpu0.more[k]!) / secs, 2)]),
      ),
    };
    const stages = databaseUrl ? await stageBreakdown(databaseUrl, runId) : undefined;
    const tail = databaseUrl
      ? await runTail(databaseUrl, runId, {
          address: o.temporalAddress,
          ...(o.namespace ? { namespace: o.namespace } : {}),
        })
      : undefined;
    const slotWaits = await workerCounter(services, 'a2a_push_host_slot_waits_total').catch(() => NaN);
    // The relays' starts, by label: a line `a2a_push_starts_total{path="direct",lane="fast",eager="true",…} n`.
    const startsBy = async (label: string) => {
      let total = 0;
      for (const w of services.workers)
        for (const line of (await (await fetch(`${w.url}/metrics`)).text()).split('\n'))
          if (line.startsWith('a2a_push_starts_total{') && line.includes(label))
            total += Number(line.split(' ').pop());
      return total;
    };
    const starts = {
      direct: await startsBy('path="direct"'),
      claim: await startsBy('path="claim"'),
      eager: await startsBy('eager="true"'),
    };
    const heldS = await workerCounter(services, 'a2a_push_host_slot_held_seconds_sum').catch(() => NaN);
    const helds = await workerCounter(services, 'a2a_push_host_slot_held_seconds_count').catch(() => NaN);
    const cores =
      cpu.workersTotal + cpu.api + (cpu.server ?? 0) + Object.values(cpu.more).reduce((a, b) => a + b, 0);
    return {
      cpuMsPerDelivery: round((cores * cpuWindowMs) / Math.max(1, arrived.length), 1),
      runId,
      n,
      delivered: arrived.length,
      writeFailures,
      writeRefusals,
      workers: pids.workers.length,
      deliveriesPerSec: round((arrived.length * 1000) / Math.max(1, elapsedMs)),
      elapsedMs,
      writesMs,
      cpuWindowMs,
      latencyMs: latency(arrived.map((e) => receiver.delivered.get(e.id)! - sentAt.get(e.id)!)),
      cpu,
      slotWaits,
      starts,
      slotHeldMs: helds > 0 ? round((heldS * 1000) / helds, 1) : NaN,
      duplicates: plan.reduce((d, e) => d + Math.max(0, (receiver.seen.get(e.id) ?? 0) - 1), 0),
      order: sequenceCheck(receiver.sequenced, (p) => p.startsWith(`/hook/${runId}-task-`)),
      ...(stages ? { stages } : {}),
      ...(tail ? { tail } : {}),
    };
  } finally {
    for (const c of cleanups) await c().catch(() => undefined);
  }
}

/**
 * Which bare shape: `classic`, baseline (a) (`bareDelivery`: one activity, started by a client of the
 * bench's own); `lean`, the floor (`bareLeanDelivery`: one local activity, started eagerly from the
 * worker's process, lib/bare-worker.ts).
 */
export type BareShape = 'classic' | 'lean';

export interface BareWorker {
  pid: number;
  /**
   * Starts one workflow per item, `concurrency` in flight: when each start was sent (epoch ms), and
   * (the floor) how many the server started eagerly.
   */
  startAll(
    items: Array<{ id: string; taskId: string }>,
    concurrency: number,
  ): Promise<{ sentAt: Map<string, number>; eager?: number }>;
  stop(): Promise<void>;
}

/**
 * A bare worker process (baseline (a), or the lean floor) on the given Temporal, and its starter: a
 * client of the bench's own for (a), the worker process itself for the floor.
 */
export async function startBareWorker(
  temporalAddress: string,
  receiver: BenchReceiver,
  namespace = 'default',
  shape: BareShape = 'classic',
): Promise<BareWorker> {
  const taskQueue = `bare-${shape}-${process.pid}-${Date.now()}`;
  const proc = await spawnBenchProcess(path.join(__dirname, 'lib', 'bare-worker.ts'), [
    temporalAddress,
    namespace,
    taskQueue,
    `${receiver.url}/hook/bare`,
    receiver.tls.caFile,
    ...(shape === 'lean' ? ['lean'] : []),
  ]);
  // Eager starts must come from the worker's process: for the floor it starts them, on our word.
  const connection = shape === 'classic' ? await Connection.connect({ address: temporalAddress }) : undefined;
  const client = connection && new Client({ connection, namespace });
  const startAll: BareWorker['startAll'] =
    client === undefined
      ? async (items, concurrency) => {
          const r = await fetch(`http://127.0.0.1:${proc.ready}/start`, {
            method: 'POST',
            body: JSON.stringify({ items, concurrency }),
          });
          if (!r.ok) throw new Error(`bare lean starts: ${r.status} ${await r.text()}`);
          const { sentAt, eager } = (await r.json()) as { sentAt: Record<string, number>; eager: number };
          return { sentAt: new Map(Object.entries(sentAt)), eager };
        }
      : async (items, concurrency) => {
          const sentAt = new Map<string, number>();
          await pool(items, concurrency, async (e) => {
            sentAt.set(e.id, Date.now());
            await client.workflow.start('bareDelivery', {
              workflowId: `bare-${e.id}`,
              taskQueue,
              args: [{ taskId: e.taskId, id: e.id }],
            });
          });
          return { sentAt };
        };
  return {
    pid: proc.pid,
    startAll,
    async stop() {
      await proc.stop();
      await connection?.close();
    },
  };
}

/**
 * Baseline (a) or the floor: n bare workflows, `concurrency` starts in flight, until the receiver saw
 * every POST. CPU is the worker process's and the server's: the floor's worker process also sends its
 * starts (as ours' api + worker process does), while (a)'s starts are sent from the bench's process and
 * not counted.
 */
export async function runBareThroughput(
  bare: BareWorker,
  receiver: BenchReceiver,
  n: number,
  o: { concurrency?: number; serverPid?: number } = {},
) {
  const runId = `b${Date.now().toString(36)}`;
  const plan = eventPlan(
    n,
    Array.from({ length: 100 }, (_, i) => `${runId}-task-${i}`),
    runId,
  );
  const cpu0 = { worker: cpuSeconds(bare.pid), server: o.serverPid ? cpuSeconds(o.serverPid) : 0 };
  const t0 = Date.now();
  const { sentAt, eager } = await bare.startAll(plan, o.concurrency ?? 32);
  await receiver.waitForAll(
    plan.map((e) => e.id),
    Math.max(120_000, n * 200),
  );
  const last = Math.max(...plan.map((e) => receiver.delivered.get(e.id)!));
  const secs = (Date.now() - t0) / 1000;
  const worker = round((cpuSeconds(bare.pid) - cpu0.worker) / secs, 2);
  const server = o.serverPid ? round((cpuSeconds(o.serverPid) - cpu0.server) / secs, 2) : undefined;
  return {
    n,
    /** Worker and server CPU ms per delivery (the whole stack: it has no database of its own). */
    cpuMsPerDelivery: round(((worker + (server ?? 0)) * secs * 1000) / n, 1),
    deliveriesPerSec: round((n * 1000) / (last - t0)),
    elapsedMs: last - t0,
    latencyMs: latency(plan.map((e) => receiver.delivered.get(e.id)! - sentAt.get(e.id)!)),
    cpu: { worker, ...(server !== undefined ? { server } : {}) },
    /** The floor: starts the server took eagerly (of n). */
    ...(eager !== undefined ? { eager } : {}),
  };
}

type BareRun = Awaited<ReturnType<typeof runBareThroughput>>;

/**
 * Baseline (a) from its runs before and after ours: deliveries/s and CPU are the means of the two;
 * latency, which has no mean, is the first run's.
 */
export function meanOfBareRuns(before: BareRun, after: BareRun): BareRun {
  const mean = (x: number, y: number, digits = 1) => round((x + y) / 2, digits);
  return {
    ...before,
    deliveriesPerSec: mean(before.deliveriesPerSec, after.deliveriesPerSec),
    cpuMsPerDelivery: mean(before.cpuMsPerDelivery, after.cpuMsPerDelivery),
    cpu: {
      worker: mean(before.cpu.worker, after.cpu.worker, 2),
      ...(before.cpu.server !== undefined && after.cpu.server !== undefined
        ? { server: mean(before.cpu.server, after.cpu.server, 2) }
        : {}),
    },
  };
}

/** Baselines (b) and (c): the same events, sent once each from one process. */
export async function runDirect(
  mode: 'sdk' | 'undici',
  receiver: BenchReceiver,
  n: number,
  concurrency = 32,
) {
  const runId = `${mode}${Date.now().toString(36)}`;
  const plan = eventPlan(
    n,
    Array.from({ length: 100 }, (_, i) => `${runId}-task-${i}`),
    runId,
  );
  const r = await runDirectSender({
    mode,
    url: `${receiver.url}/hook/${mode}`,
    caFile: receiver.tls.caFile,
    concurrency,
    items: plan,
  });
  const delivered = plan.filter((e) => receiver.delivered.has(e.id));
  const t0 = Math.min(...Object.values(r.sentAt));
  const last = Math.max(...delivered.map((e) => receiver.delivered.get(e.id)!));
  return {
    n,
    delivered: delivered.length,
    deliveriesPerSec: round((delivered.length * 1000) / Math.max(1, last - t0)),
    latencyMs: latency(delivered.map((e) => receiver.delivered.get(e.id)! - r.sentAt[e.id]!)),
  };
}

/** How a run's receiver saw its configs' sequence numbers, in words. */
export const orderNote = (o: SequenceCheck) =>
  `${o.requests} POSTs over ${o.configs} configs: ${o.outOfOrder} out of order, ${o.duplicates} resent, ${o.gaps} numbers never seen`;

export const deliveryBenchmark: Benchmark = {
  name: 'delivery',
  title: '1. Delivery throughput, end to end',
  async run(ctx: BenchContext): Promise<BenchResult> {
    const n = ctx.quick ? 200 : 1000;
    const temporal = await ctx.temporal();
    const receiver = ctx.receiver;
    // Ours under both orders, each on a fresh database with processes of its own: per_config (the
    // default) is the one judged against the target; none is printed beside it.
    const ourRun = async (order: DeliveryOrder, more: Record<string, string> = {}) => {
      ctx.log(
        `ours, DELIVERY_ORDER=${order}${Object.entries(more)
          .map(([k, v]) => ` ${k}=${v}`)
          .join('')}: ${n} events over 100 tasks, 1 worker process`,
      );
      return runDeliveryThroughput({
        temporalAddress: temporal.address,
        n,
        databaseUrl: await freshDatabase(ctx.pg),
        receiver,
        serverPid: temporal.pid,
        // The whole stack's CPU: the run's Postgres serves ours alone while it runs.
        cpuOf: { postgres: () => postgresCpuSeconds(ctx.pgDir) },
        env: { DELIVERY_ORDER: order, ...more },
      });
    };
    // Baseline (a), the bare workflow, runs before ours and again after: this machine's speed drifts
    // within minutes (the bare rate moved 50-83 /s within an hour), and ours is judged against the mean
    // of the two runs around it rather than one run after it.
    const bareRun = async (which: string, shape: BareShape = 'classic') => {
      ctx.log(
        shape === 'classic'
          ? `baseline (a): bare workflow, ${which}`
          : `the floor (d): bare lean workflow (eager start, local activity), ${which}`,
      );
      const bare = await startBareWorker(temporal.address, receiver, 'default', shape);
      try {
        return await runBareThroughput(bare, receiver, n, { serverPid: temporal.pid });
      } finally {
        await bare.stop();
      }
    };
    const aBefore = await bareRun('before ours');
    // The floor (d), the fewest round trips Temporal's SDK offers for one delivery, around ours as (a):
    // a ratio to (a) that the floor itself does not reach is out of ours' reach (issue 21).
    const dBefore = await bareRun('before ours', 'lean');
    const ours = await ourRun('per_config');
    const unordered = await ourRun('none');
    // A diagnostic beside them (no target): every config here is at one receiver, one target, so most
    // deliveries of a burst wait once in the host's line (OUTBOUND_HOST_CONCURRENCY, 8). With the bound
    // out of the way, what the pipeline itself does.
    const unbound = await ourRun('none', { OUTBOUND_HOST_CONCURRENCY: '10000' });
    const aAfter = await bareRun('after ours');
    const dAfter = await bareRun('after ours', 'lean');
    const a = meanOfBareRuns(aBefore, aAfter);
    const d = meanOfBareRuns(dBefore, dAfter);
    ctx.log('baselines (b) @a2a-js/sdk and (c) raw undici');
    const b = await runDirect('sdk', receiver, n);
    const c = await runDirect('undici', receiver, n);
    const lat = (label: string, l: Latency) => latencyRows('1 delivery', label, l);
    const tp = (label: string, v: number): ChartRow => ({
      bench: '1 delivery',
      series: label,
      metric: 'throughput',
      value: v,
      unit: 'deliveries/s',
    });
    // A target on deliveries/s: at least `factor` × the bare workflow's, in the same run.
    const againstBare = (mode: string, r: { deliveriesPerSec: number }, factor: number, text: string) =>
      figure(
        `ours (${mode}) deliveries/s`,
        r.deliveriesPerSec,
        '/s',
        { label: '(a) bare workflow', value: a.deliveriesPerSec },
        { text, met: r.deliveriesPerSec >= factor * a.deliveriesPerSec },
      );
    return {
      name: this.name,
      title: this.title,
      figures: [
        againstBare('per_config', ours, 0.8, '≥ 0.8 × (a)'),
        againstBare('per_config', ours, 1.5, '≥ 1.5 × (a), issue 21'),
        againstBare('none', unordered, 1.5, '≥ 1.5 × (a), issue 21'),
        figure('(d) floor: bare lean workflow deliveries/s', d.deliveriesPerSec, '/s', {
          label: '(a) bare workflow',
          value: a.deliveriesPerSec,
        }),
        figure('ours (per_config) deliveries/s', ours.deliveriesPerSec, '/s', {
          label: '(d) floor: bare lean workflow',
          value: d.deliveriesPerSec,
        }),
        figure('(d) floor: CPU per delivery, worker + server', d.cpuMsPerDelivery, 'ms', {
          label: '(a) worker + server',
          value: a.cpuMsPerDelivery,
        }),
        figure('ours (per_config) deliveries/s', ours.deliveriesPerSec, '/s', {
          label: 'ours (none)',
          value: unordered.deliveriesPerSec,
        }),
        figure('ours (per_config) deliveries/s', ours.deliveriesPerSec, '/s', {
          label: '(b) @a2a-js/sdk sender',
          value: b.deliveriesPerSec,
        }),
        figure('ours (per_config) deliveries/s', ours.deliveriesPerSec, '/s', {
          label: '(c) raw undici',
          value: c.deliveriesPerSec,
        }),
        figure('ours (per_config) event → POST p50', ours.latencyMs.p50, 'ms', {
          label: '(a) start → POST p50',
          value: a.latencyMs.p50,
        }),
        figure('ours (per_config) event → POST p99', ours.latencyMs.p99, 'ms', {
          label: '(a) start → POST p99',
          value: a.latencyMs.p99,
        }),
        figure('ours (none) event → POST p50', unordered.latencyMs.p50, 'ms', {
          label: '(a) start → POST p50',
          value: a.latencyMs.p50,
        }),
        figure('ours (none) event → POST p99', unordered.latencyMs.p99, 'ms', {
          label: '(a) start → POST p99',
          value: a.latencyMs.p99,
        }),
        figure('(b) sdk send → POST p50/p99', b.latencyMs.p50, 'ms', {
          label: '(c) undici p50',
          value: c.latencyMs.p50,
        }),
        figure('ours (per_config) worker CPU', ours.cpu.workersTotal, 'cores', {
          label: '(a) worker CPU',
          value: a.cpu.worker,
        }),
        figure('ours (none) worker CPU', unordered.cpu.workersTotal, 'cores', {
          label: '(a) worker CPU',
          value: a.cpu.worker,
        }),
        figure('dev server CPU (ours, per_config)', ours.cpu.server ?? NaN, 'cores', {
          label: 'dev server CPU (a)',
          value: a.cpu.server ?? NaN,
        }),
        figure('dev server CPU (ours, none)', unordered.cpu.server ?? NaN, 'cores', {
          label: 'dev server CPU (a)',
          value: a.cpu.server ?? NaN,
        }),
        figure('ours (per_config) CPU per delivery, whole stack', ours.cpuMsPerDelivery, 'ms', {
          label: '(a) worker + server',
          value: a.cpuMsPerDelivery,
        }),
        figure('ours (none) CPU per delivery, whole stack', unordered.cpuMsPerDelivery, 'ms', {
          label: '(a) worker + server',
          value: a.cpuMsPerDelivery,
        }),
        figure('ours (per_config) Postgres CPU', ours.cpu.more.postgres ?? NaN, 'cores'),
        figure('ours (per_config) api CPU (0: in the worker, layout combined)', ours.cpu.api, 'cores'),
        figure('ours (per_config) arrivals out of order', ours.order.outOfOrder, 'POSTs'),
        figure('ours (none) arrivals out of order', unordered.order.outOfOrder, 'POSTs'),
        figure(
          'diagnostic: ours (none, OUTBOUND_HOST_CONCURRENCY=10000) deliveries/s',
          unbound.deliveriesPerSec,
          '/s',
          { label: '(a) bare workflow', value: a.deliveriesPerSec },
        ),
        figure(
          'diagnostic: ours (none, OUTBOUND_HOST_CONCURRENCY=10000) CPU per delivery, whole stack',
          unbound.cpuMsPerDelivery,
          'ms',
          { label: '(a) worker + server', value: a.cpuMsPerDelivery },
        ),
      ],
      chart: [
        tp('ours (per_config)', ours.deliveriesPerSec),
        tp('ours (none)', unordered.deliveriesPerSec),
        tp('(a) bare workflow', a.deliveriesPerSec),
        tp('(d) floor: bare lean', d.deliveriesPerSec),
        tp('(b) @a2a-js/sdk', b.deliveriesPerSec),
        tp('(c) raw undici', c.deliveriesPerSec),
        ...lat('ours (per_config)', ours.latencyMs),
        ...lat('ours (none)', unordered.latencyMs),
        ...lat('(a) bare workflow', a.latencyMs),
        ...lat('(d) floor: bare lean', d.latencyMs),
        ...lat('(b) @a2a-js/sdk', b.latencyMs),
        ...lat('(c) raw undici', c.latencyMs),
      ],
      notes: [
        `ours (per_config), p50 per stage (ms): ${JSON.stringify(ours.stages ?? {})}`,
        `ours (none), p50 per stage (ms): ${JSON.stringify(unordered.stages ?? {})}`,
        `attempts without a 2xx (each waits a retry's backoff): per_config ${JSON.stringify(ours.tail?.notDelivered ?? {})}, none ${JSON.stringify(unordered.tail?.notDelivered ?? {})}, none with the bound raised ${JSON.stringify(unbound.tail?.notDelivered ?? {})}.`,
        `slowest jobs, write → finished (write → dispatched / → first attempt / → finished, ms): per_config ${(ours.tail?.slowest ?? []).join('; ')}; none ${(unordered.tail?.slowest ?? []).join('; ')}; none with the bound raised ${(unbound.tail?.slowest ?? []).join('; ')}.`,
        `${n} events over 100 tasks (one config each, ${n / 100} events per config), 32 event writes in flight; (a) 32 starts in flight; (b), (c) 32 sends in flight from one process.`,
        'ours runs three times, each on a fresh database with api and worker processes of its own: DELIVERY_ORDER=per_config (the default; judged against the target), then none, then none with OUTBOUND_HOST_CONCURRENCY=10000 (a diagnostic: what the host bound costs when every config is at one target). (a) and then (d) run before them and again after; then (b), (c).',
        `(d) the floor: one workflow per delivery whose POST is a local activity, started eagerly by a client in its worker's process (lib/bare-worker.ts \`lean\`): one start and one workflow task completion, no database, api or checks (eager starts: ${dBefore.eager ?? '?'} and ${dAfter.eager ?? '?'} of ${n}; its worker process sends the starts, and its CPU counts them, as ours'); ${dBefore.deliveriesPerSec} /s before ours, ${dAfter.deliveriesPerSec} /s after (CPU per delivery ${dBefore.cpuMsPerDelivery} and ${dAfter.cpuMsPerDelivery} ms; worker ${d.cpu.worker} and dev server ${d.cpu.server ?? '?'} cores), the mean used as (a)'s; ours does all of its work and more, so, one workflow per delivery, ours ÷ (a) beyond (d) ÷ (a) is out of reach: ${ratio(d.deliveriesPerSec, a.deliveriesPerSec)} here.`,
        `(a) bare workflow: ${aBefore.deliveriesPerSec} /s before ours, ${aAfter.deliveriesPerSec} /s after (CPU per delivery ${aBefore.cpuMsPerDelivery} and ${aAfter.cpuMsPerDelivery} ms); ratios use the mean, ${a.deliveriesPerSec} /s; its latency is the first run's.`,
        `receiver, by X-A2A-Push-Sequence: per_config ${orderNote(ours.order)}; none ${orderNote(unordered.order)}.`,
        '(b) and (c) send once and keep nothing durable: they are the ceiling of one process posting, not a like-for-like sender.',
        `(b) latency p99 ${b.latencyMs.p99} ms, (c) p99 ${c.latencyMs.p99} ms.`,
        `starts (per_config, the workers' a2a_push_starts_total): ${ours.starts.direct} by the process that made the job due, ${ours.starts.claim} by claim runs; ${ours.starts.eager} of them eager.`,
        `host slot waits (OUTBOUND_HOST_CONCURRENCY): per_config ${ours.slotWaits}, none ${unordered.slotWaits}, none with the bound raised ${unbound.slotWaits}; mean time an attempt held its slot: per_config ${ours.slotHeldMs} ms, none ${unordered.slotHeldMs} ms.`,
        `ours: ${ours.writeRefusals} (per_config) and ${unordered.writeRefusals} (none) event writes answered 503 and retried after their Retry-After.`,
      ],
      details: {
        ours,
        oursNone: unordered,
        oursUnbound: unbound,
        a,
        aBefore,
        aAfter,
        d,
        dBefore,
        dAfter,
        b,
        c,
      },
    };
  },
};
