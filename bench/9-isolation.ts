import { Client, Connection } from '@temporalio/client';
import { Client as PgClient } from 'pg';
import { createApiKey } from '../src/db/apikeys';
import { createPool } from '../src/db/pool';
import { makeDeliveryWorkflowId } from '../src/ids';
import { ApiClient, eventPlan } from './lib/api';
import type { BenchContext, BenchTemporal, Benchmark } from './lib/context';
import { figure, type ChartRow, type Figure } from './lib/report';
import { SHORT_RETRIES, startBenchTemporal, startSender, type Services } from './lib/stack';
import { startTargets, type BenchTargets, type TargetMode } from './lib/target';
import { latency, percentile, pool, ratio, round, sleep, waitUntil, type Latency } from './lib/util';

/** The per-host bound the run asks for (OUTBOUND_HOST_CONCURRENCY); code without the setting ignores it. */
const HOST_BOUND = 8;
/** DELIVERY_TIMEOUT stays at its default for the run. */
const DELIVERY_TIMEOUT_MS = 15_000;
/** The healthy tenant's events go round-robin over this many tasks (one config each). */
const HEALTHY_TASKS = 10;

/**
 * Settings for every sender of the benchmark: short retries (so the recovered host is tried again
 * soon), attempts raised so that no job ends `exhausted` while its host is dead (a final status
 * then means delivered), every loopback address allowed (the dead and slow hosts are 127.0.x.y).
 */
const ENV: Record<string, string> = {
  ...SHORT_RETRIES,
  DELIVERY_MAX_ATTEMPTS: '100',
  OUTBOUND_ALLOW_CIDRS: '127.0.0.0/8',
  OUTBOUND_HOST_CONCURRENCY: String(HOST_BOUND),
};

function sizes(quick: boolean) {
  return {
    /** Length of each healthy stream (one event every 0.5 s). */
    streamS: quick ? 30 : 300,
    /** Dead-host configs in (a) and (b), one delivery each. */
    deadConfigs: quick ? 200 : 1000,
    deadHosts: 50,
    /** Configs to the slow target in (c), each kept with one job outstanding. */
    slowConfigs: quick ? 200 : 1000,
    /** (d): tenant A's burst. */
    burst: quick ? { events: 1000, configs: 20 } : { events: 5000, configs: 100 },
    /** (d): tenant B's idle events (one a second) on each dev server. */
    idleEvents: quick ? 10 : 30,
    /** (d): B writes at most this long while A's burst drains. */
    burstStreamMaxS: quick ? 240 : 900,
    /** Waits for deliveries (healthy events, the recovered host's jobs). */
    waitMs: quick ? 300_000 : 900_000,
  };
}

interface Stack {
  services: Services;
  pg: PgClient;
  /** Tenant A (the bootstrap key): the dead, slow or bursting configs. */
  apiA: ApiClient;
  /** Tenant B (a key made for the run): the healthy stream. */
  apiB: ApiClient;
  runId: string;
  healthyTasks: string[];
  stop(): Promise<void>;
}

/** A fresh sender (database, api, worker) with tenant B's key and configs, warmed by 5 unmeasured events. */
async function startStack(ctx: BenchContext, temporal?: BenchTemporal): Promise<Stack> {
  const { databaseUrl, services } = await startSender(ctx, ctx.receiver, ENV, temporal);
  const db = createPool(databaseUrl, 2);
  let keyB: string;
  try {
    keyB = (await createApiKey(db, 'bench-tenant-b', undefined, 'bench')).key;
  } finally {
    await db.end();
  }
  const pg = new PgClient({ connectionString: databaseUrl });
  await pg.connect();
  const apiA = new ApiClient(services.api.url, services.apiKey, 32);
  const apiB = new ApiClient(services.api.url, keyB, 8);
  const runId = `iso${Date.now().toString(36)}`;
  const healthyTasks = Array.from({ length: HEALTHY_TASKS }, (_, i) => `${runId}-b-${i}`);
  const stop = async () => {
    await apiA.close();
    await apiB.close();
    await pg.end();
    await services.stop();
  };
  try {
    await apiB.createConfigs(healthyTasks, 1, ctx.receiver.url);
    for (let i = 0; i < 5; i++) {
      const id = `${runId}-warm-${i}`;
      await apiB.postEvent(healthyTasks[i % HEALTHY_TASKS]!, id);
      await waitUntil(`warm-up ${id}`, () => ctx.receiver.delivered.has(id), 60_000);
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { services, pg, apiA, apiB, runId, healthyTasks, stop };
}

/**
 * One event every `everyMs` (on a fixed schedule, not waiting for the answers) over `tasks` until
 * `stop(i, elapsedMs)`; answers when every write was answered. `sent`: id → time the write was sent.
 */
async function stream(
  api: ApiClient,
  tasks: string[],
  prefix: string,
  everyMs: number,
  stop: (i: number, elapsedMs: number) => boolean,
): Promise<{ sent: Map<string, number>; failed: number }> {
  const sent = new Map<string, number>();
  const writes: Array<Promise<void>> = [];
  let failed = 0;
  const start = Date.now();
  for (let i = 0; ; i++) {
    const wait = start + i * everyMs - Date.now();
    if (wait > 0) await sleep(wait);
    if (stop(i, Date.now() - start)) break;
    const id = `${prefix}-${i}`;
    sent.set(id, Date.now());
    writes.push(
      api.postEvent(tasks[i % tasks.length]!, id).catch(() => {
        failed++;
        sent.delete(id);
      }),
    );
  }
  await Promise.all(writes);
  return { sent, failed };
}

/** Event write sent → the receiver saw its POST, for the events delivered within `waitMs`. */
async function streamLatency(
  ctx: BenchContext,
  sent: Map<string, number>,
  waitMs: number,
): Promise<{ lat: Latency; undelivered: number; afterFirst10s: Latency }> {
  try {
    await ctx.receiver.waitForAll(sent.keys(), waitMs);
  } catch {
    // reported as undelivered
  }
  const values: number[] = [];
  const later: number[] = [];
  const first = Math.min(...sent.values());
  for (const [id, t0] of sent) {
    const at = ctx.receiver.delivered.get(id);
    if (at === undefined) continue;
    values.push(at - t0);
    if (t0 >= first + 10_000) later.push(at - t0);
  }
  // afterFirst10s: the same without the stream's first 10 s (a diagnostic: what the start of a
  // scenario, e.g. tenant A's writes just before it, costs the stream).
  return { lat: latency(values), undelivered: sent.size - values.length, afterFirst10s: latency(later) };
}

/**
 * Where the events' time went, p50 and p90 per stage (ms): write sent → committed (the api; the
 * job's created_at is its transaction's start), → workflow started (the dispatcher), → attempt
 * started (Temporal and the worker), → the receiver saw the POST. Same machine, same clock.
 */
async function stagesOf(
  ctx: BenchContext,
  pg: PgClient,
  sent: Map<string, number>,
): Promise<Record<string, number>> {
  const rows = await eventRows(pg, sent);
  const stages: Record<string, number[]> = {
    'sent→written': [],
    'written→started': [],
    'started→attempt': [],
    'attempt→seen': [],
  };
  for (const x of rows) {
    const t0 = sent.get(x.id)!;
    const seen = ctx.receiver.delivered.get(x.id);
    stages['sent→written']!.push(Number(x.created) - t0);
    if (x.dispatched !== null) stages['written→started']!.push(Number(x.dispatched) - Number(x.created));
    if (x.dispatched !== null && x.started !== null)
      stages['started→attempt']!.push(Number(x.started) - Number(x.dispatched));
    if (x.started !== null && seen !== undefined) stages['attempt→seen']!.push(seen - Number(x.started));
  }
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(stages)) {
    if (v.length === 0) continue;
    out[`${k} p50`] = round(percentile(v, 50));
    out[`${k} p90`] = round(percentile(v, 90));
  }
  return out;
}

/**
 * The `k` slowest events of a stream, each as "+offset s: total ms (written, started, attempt, seen
 * ms after the one before)", offset from the stream's first write: a diagnostic of what a p99 is made
 * of (a stage, and whether the slow ones come in waves).
 */
async function slowest(
  ctx: BenchContext,
  pg: PgClient,
  sent: Map<string, number>,
  k: number,
): Promise<string> {
  const rows = await eventRows(pg, sent);
  const first = Math.min(...sent.values());
  const d = (a: number | null, b: number | null) => (a === null || b === null ? '?' : String(round(a - b)));
  return rows
    .map((x) => {
      const t0 = sent.get(x.id)!;
      const seen = ctx.receiver.delivered.get(x.id) ?? null;
      const created = Number(x.created);
      const dispatched = x.dispatched === null ? null : Number(x.dispatched);
      const started = x.started === null ? null : Number(x.started);
      return { total: seen === null ? Infinity : seen - t0, t0, created, dispatched, started, seen };
    })
    .sort((a, b) => b.total - a.total)
    .slice(0, k)
    .map(
      (e) =>
        `+${round((e.t0 - first) / 1000)} s: ${round(e.total)} ms (${d(e.created, e.t0)}, ${d(e.dispatched, e.created)}, ${d(e.started, e.dispatched)}, ${d(e.seen, e.started)})`,
    )
    .join('; ');
}

/**
 * A stream's event → POST p50 by stretch of the stream ("0-10 s: 240 ms (9)", the count in brackets):
 * whether a scenario's cost sits at its start (the writes and starts of a burst) or all along.
 */
function timeline(ctx: BenchContext, sent: Map<string, number>, edgesS = [0, 10, 30, 60, 120]): string {
  const first = Math.min(...sent.values());
  const bins = edgesS.map(() => [] as number[]);
  for (const [id, t0] of sent) {
    const seen = ctx.receiver.delivered.get(id);
    if (seen === undefined) continue;
    const off = (t0 - first) / 1000;
    let i = edgesS.length - 1;
    while (i > 0 && off < edgesS[i]!) i--;
    bins[i]!.push(seen - t0);
  }
  return edgesS
    .map((from, i) => {
      const span = i + 1 < edgesS.length ? `${from}-${edgesS[i + 1]} s` : `${from} s-`;
      return bins[i]!.length === 0
        ? ''
        : `${span}: ${round(percentile(bins[i]!, 50))} ms (${bins[i]!.length})`;
    })
    .filter((x) => x !== '')
    .join(', ');
}

/**
 * Where B's time went inside Temporal and the worker, from its workflows' histories (the dev server's
 * clock: the same machine's): first workflow task scheduled → started (matching: a poller and a slot
 * of the worker free), started → completed (the worker ran it), activity scheduled → started
 * (matching again), activity started → completed, then the second workflow task's queue. p50 / p90 ms.
 * A stage no run had is left out: under the lean type a fast-lane attempt is a local activity inside
 * the first workflow task ('task1 run' then includes it), so its runs have no activity or second task.
 */
async function temporalStagesOf(
  address: string,
  pg: PgClient,
  sent: Map<string, number>,
): Promise<Record<string, number>> {
  const r = await pg.query<{ job: string }>(
    `SELECT j.id AS job FROM delivery_jobs j JOIN task_events e ON e.id = j.event_id
      WHERE substring(e.body FROM '"bench":"([^"]+)"') = ANY($1::text[])`,
    [[...sent.keys()]],
  );
  const stages: Record<string, number[]> = {
    'start→task1 scheduled': [],
    'task1 queue': [],
    'task1 run': [],
    'activity queue': [],
    'activity run': [],
    'task2 queue': [],
    'task2 run': [],
  };
  const connection = await Connection.connect({ address });
  try {
    const client = new Client({ connection });
    for (const { job } of r.rows) {
      const events =
        (await client.workflow.getHandle(makeDeliveryWorkflowId(job)).fetchHistory()).events ?? [];
      const at = (e: (typeof events)[number] | undefined) =>
        e?.eventTime ? Number(e.eventTime.seconds) * 1000 + Math.round((e.eventTime.nanos ?? 0) / 1e6) : NaN;
      const all = (k: keyof (typeof events)[number]) => events.filter((e) => e[k]);
      const scheduled = all('workflowTaskScheduledEventAttributes');
      const started = all('workflowTaskStartedEventAttributes');
      const completed = all('workflowTaskCompletedEventAttributes');
      const push = (k: string, v: number) => {
        if (Number.isFinite(v)) stages[k]!.push(v);
      };
      push('start→task1 scheduled', at(scheduled[0]) - at(events[0]));
      push('task1 queue', at(started[0]) - at(scheduled[0]));
      push('task1 run', at(completed[0]) - at(started[0]));
      push(
        'activity queue',
        at(all('activityTaskStartedEventAttributes')[0]) - at(all('activityTaskScheduledEventAttributes')[0]),
      );
      push(
        'activity run',
        at(all('activityTaskCompletedEventAttributes')[0]) - at(all('activityTaskStartedEventAttributes')[0]),
      );
      push('task2 queue', at(started[1]) - at(scheduled[1]));
      push('task2 run', at(completed[1]) - at(started[1]));
    }
  } finally {
    await connection.close();
  }
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(stages)) {
    if (v.length === 0) continue;
    out[`${k} p50`] = round(percentile(v, 50));
    out[`${k} p90`] = round(percentile(v, 90));
  }
  return out;
}

async function eventRows(pg: PgClient, sent: Map<string, number>) {
  const r = await pg.query<{
    id: string;
    created: number;
    dispatched: number | null;
    started: number | null;
  }>(
    `SELECT substring(e.body FROM '"bench":"([^"]+)"') AS id,
            extract(epoch FROM j.created_at) * 1000 AS created,
            extract(epoch FROM j.dispatched_at) * 1000 AS dispatched,
            extract(epoch FROM a.started_at) * 1000 AS started
       FROM delivery_jobs j JOIN task_events e ON e.id = j.event_id
       LEFT JOIN delivery_attempts a ON a.job_id = j.id AND a.n = 1
      WHERE substring(e.body FROM '"bench":"([^"]+)"') = ANY($1::text[])`,
    [[...sent.keys()]],
  );
  return r.rows;
}

/** Job counts by status for the run's tasks of one tenant (`a` or `b`). */
async function statusCounts(pg: PgClient, runId: string, side: 'a' | 'b'): Promise<Record<string, number>> {
  const r = await pg.query<{ status: string; n: string }>(
    `SELECT status, count(*) AS n FROM delivery_jobs WHERE task_id LIKE $1 GROUP BY status`,
    [`${runId}-${side}-%`],
  );
  return Object.fromEntries(r.rows.map((x) => [x.status, Number(x.n)]));
}

/**
 * When tenant A's jobs got their workflows, in s after `t0` (epoch ms): p50, p90 and the last, as
 * "p50 3.1 s, p90 40.2 s, last 52 s": how long the dispatcher's starts of a burst ran beside the rest.
 */
async function startSpread(pg: PgClient, runId: string, t0: number): Promise<string> {
  const r = await pg.query<{ at: number }>(
    `SELECT extract(epoch FROM dispatched_at) * 1000 AS at FROM delivery_jobs
      WHERE task_id LIKE $1 AND dispatched_at IS NOT NULL`,
    [`${runId}-a-%`],
  );
  const s = r.rows.map((x) => (Number(x.at) - t0) / 1000);
  if (s.length === 0) return 'none started';
  return `p50 ${round(percentile(s, 50))} s, p90 ${round(percentile(s, 90))} s, last ${round(Math.max(...s))} s`;
}

const OPEN = ['queued', 'in_flight', 'waiting_retry'];
const openOf = (c: Record<string, number>) => OPEN.reduce((n, s) => n + (c[s] ?? 0), 0);
const totalOf = (c: Record<string, number>) => Object.values(c).reduce((n, k) => n + k, 0);

/**
 * Requests per second a target received, over the longest whole number of DELIVERY_TIMEOUTs from its
 * first request until `until` (attempts to a black hole come in waves one timeout apart).
 */
function attemptRate(arrivals: number[], until: number) {
  const a = arrivals.filter((x) => x < until).sort((x, y) => x - y);
  if (a.length === 0) return { rate: 0, count: 0, windowS: 0 };
  const k = Math.max(1, Math.floor((until - a[0]!) / DELIVERY_TIMEOUT_MS));
  const end = a[0]! + k * DELIVERY_TIMEOUT_MS;
  const count = a.filter((x) => x < end).length;
  const windowS = (k * DELIVERY_TIMEOUT_MS) / 1000;
  return { rate: round(count / windowS, 2), count, windowS };
}

/** The healthy stream alone, on a fresh sender: the baseline of (a)-(c). */
async function healthyAlone(ctx: BenchContext, streamS: number, waitMs: number) {
  const st = await startStack(ctx);
  try {
    const { sent, failed } = await stream(
      st.apiB,
      st.healthyTasks,
      `${st.runId}-alone`,
      500,
      (i) => i * 500 >= streamS * 1000,
    );
    const { lat, undelivered } = await streamLatency(ctx, sent, waitMs);
    return { lat, undelivered, failed, sent: sent.size };
  } finally {
    await st.stop();
  }
}

interface HostScenario {
  key: 'a' | 'b' | 'c';
  hosts: string[];
  perHost: number;
  mode: TargetMode;
  /** Write the config's next event each time the target answers one (keeps every config busy). */
  refill: boolean;
}

/**
 * Tenant A's configs to the misbehaving host(s), one event each; then tenant B's healthy stream for
 * `streamS`, held until every healthy event arrived (the hosts still misbehaving); then the hosts
 * recover (answer 200 at once) and every job of A must reach a final status.
 */
async function hostScenario(ctx: BenchContext, s: HostScenario, streamS: number, waitMs: number) {
  const targets: BenchTargets = await startTargets(s.hosts, s.mode);
  let st: Stack | undefined;
  try {
    st = await startStack(ctx);
    const { apiA, runId } = st;
    const tasksByHost = s.hosts.map((_, h) =>
      Array.from({ length: s.perHost }, (__, j) => `${runId}-a-h${h}-${j}`),
    );
    for (let h = 0; h < s.hosts.length; h++) await apiA.createConfigs(tasksByHost[h]!, 1, targets.urls[h]!);
    const tasks = tasksByHost.flat();
    let refilling = s.refill;
    let refills = 0;
    let refillFailures = 0;
    const next = new Map<string, number>();
    targets.onAnswered = (_id, path) => {
      if (!refilling) return;
      const task = path.split('/')[2];
      if (!task) return;
      const k = (next.get(task) ?? 0) + 1;
      next.set(task, k);
      refills++;
      apiA.postEvent(task, `${task}-e${k}`).catch(() => refillFailures++);
    };
    const t0 = Date.now();
    await pool(tasks, 32, (t) => apiA.postEvent(t, `${t}-e0`));
    const writtenS = round((Date.now() - t0) / 1000);
    ctx.log(
      `(${s.key}) ${tasks.length} jobs to ${s.hosts.length} host(s) written in ${writtenS} s; healthy stream for ${streamS} s`,
    );
    const { sent, failed } = await stream(
      st.apiB,
      st.healthyTasks,
      `${runId}-healthy`,
      500,
      (i) => i * 500 >= streamS * 1000,
    );
    const streamEnd = Date.now();
    const healthy = await streamLatency(ctx, sent, waitMs);
    const recoveredAt = Date.now();
    ctx.log(
      `(${s.key}) healthy stream delivered ${round((recoveredAt - streamEnd) / 1000)} s after it ended; host(s) recover`,
    );
    const rate = attemptRate(targets.arrivals, recoveredAt);
    const answeredBefore = targets.delivered.size;
    refilling = false;
    targets.setMode({ kind: 'ok' });
    const pg = st.pg;
    let final: Record<string, number> = {};
    try {
      await waitUntil(
        'every job of the recovered host(s) final',
        async () => {
          final = await statusCounts(pg, runId, 'a');
          return openOf(final) === 0;
        },
        waitMs,
      );
    } catch {
      // reported as lost
    }
    final = await statusCounts(pg, runId, 'a');
    const allFinalS = round((Date.now() - recoveredAt) / 1000);
    const healthyJobs = await statusCounts(pg, runId, 'b');
    const healthySlowest = await slowest(ctx, pg, sent, 12);
    return {
      healthySlowest,
      healthy: healthy.lat,
      healthyAfterFirst10s: healthy.afterFirst10s,
      healthyUndelivered: healthy.undelivered,
      healthyFailedWrites: failed,
      healthySent: sent.size,
      healthyJobs,
      heldAfterStreamS: round((recoveredAt - streamEnd) / 1000),
      rate,
      requestsWhileBad: targets.arrivals.filter((x) => x < recoveredAt).length,
      answeredBefore,
      jobs: totalOf(final),
      lost: openOf(final),
      final,
      allFinalS,
      writtenS,
      refills,
      refillFailures,
    };
  } finally {
    await st?.stop();
    await targets.close();
  }
}

/**
 * (d) on its own dev server with `matching.enableFairness` on or off: tenant B's idle latency, then
 * tenant A's burst (A's configs on their own host), then B one event a second until A's burst drained.
 * (e), `secondTry`: the same with fairness on, and every B delivery of the run answered 503 on its first
 * try and 200 on its second, so that each needs a second workflow task after its retry wait
 * (SHORT_RETRIES: 0.5 s ± 20 %). The worker takes that task from its sticky queue while the run is
 * cached (one poller, outside the task queue whose fairness key orders the tenants); what that costs B
 * during A's burst is what (e) measures.
 */
async function fairnessRun(
  ctx: BenchContext,
  fairness: boolean,
  z: ReturnType<typeof sizes>,
  secondTry = false,
) {
  const temporal = await startBenchTemporal(ctx.dir, 'wal', undefined, undefined, [
    `matching.enableFairness=${fairness}`,
    // BENCH9_DYNAMIC_CONFIG: more dynamic config for (d)'s dev servers (key=value;key=value), to try one.
    ...(process.env.BENCH9_DYNAMIC_CONFIG?.split(';').filter(Boolean) ?? []),
  ]);
  try {
    const targets = await startTargets(['127.0.3.1'], { kind: 'ok' });
    let st: Stack | undefined;
    try {
      st = await startStack(ctx, temporal);
      const { apiA, apiB, runId, healthyTasks } = st;
      // After the warm-up: B's idle and busy events only (A's burst goes to its own host).
      if (secondTry) ctx.receiver.setScript((id, k) => (id.startsWith(`${runId}-`) && k === 1 ? 503 : 200));
      const tasksA = Array.from({ length: z.burst.configs }, (_, i) => `${runId}-a-${i}`);
      await apiA.createConfigs(tasksA, 1, targets.urls[0]!);
      const idleRun = await stream(apiB, healthyTasks, `${runId}-idle`, 1000, (i) => i >= z.idleEvents);
      const idle = await streamLatency(ctx, idleRun.sent, 60_000);
      const idleTemporal = await temporalStagesOf(temporal.address, st.pg, idleRun.sent).catch(
        (err: unknown) => ({ error: String(err) }),
      );
      const plan = eventPlan(z.burst.events, tasksA, `${runId}-burst`);
      const t0 = Date.now();
      await pool(plan, 32, (e) => apiA.postEvent(e.taskId, e.id));
      const writtenS = round((Date.now() - t0) / 1000);
      ctx.log(
        `${secondTry ? '(e)' : '(d)'} fairness ${fairness ? 'on' : 'off'}: A's ${plan.length} events written in ${writtenS} s; B writes one a second until they are delivered`,
      );
      const aDone = () => targets.delivered.size >= plan.length;
      const busy = await stream(
        apiB,
        healthyTasks,
        `${runId}-busy`,
        1000,
        (i, ms) => (aDone() && i >= 10) || ms >= z.burstStreamMaxS * 1000,
      );
      const busyLat = await streamLatency(ctx, busy.sent, z.waitMs);
      const busyStages = await stagesOf(ctx, st.pg, busy.sent);
      const busyTemporal = await temporalStagesOf(temporal.address, st.pg, busy.sent).catch(
        (err: unknown) => ({
          error: String(err),
        }),
      );
      const busyTimeline = timeline(ctx, busy.sent);
      const busySlowest = await slowest(ctx, st.pg, busy.sent, 8);
      try {
        await waitUntil("A's burst delivered", aDone, z.waitMs);
      } catch {
        // reported
      }
      const aLast = targets.delivered.size > 0 ? Math.max(...targets.delivered.values()) : NaN;
      return {
        fairness,
        idle: idle.lat,
        busy: busyLat.lat,
        busyUndelivered: busyLat.undelivered,
        busyStages,
        busyTemporal,
        idleTemporal,
        busyTimeline,
        busySlowest,
        busyEvents: busy.sent.size,
        writtenS,
        burstDelivered: targets.delivered.size,
        burstDrainS: round((aLast - t0) / 1000),
        burstJobs: await statusCounts(st.pg, runId, 'a'),
        burstStarts: await startSpread(st.pg, runId, t0),
      };
    } finally {
      if (secondTry) ctx.receiver.setScript(() => 200);
      await st?.stop();
      await targets.close();
    }
  } finally {
    await temporal.stop();
  }
}

type FairnessRun = Awaited<ReturnType<typeof fairnessRun>>;

/** A (d) or (e) run in words: B idle and during the burst, A's burst, where B's time went. */
const fairnessNote = (series: string, r: FairnessRun, z: ReturnType<typeof sizes>) =>
  `${series}: B idle p50/p99 ${r.idle.p50}/${r.idle.p99} ms (${z.idleEvents} events); during the burst ${r.busyEvents} events, p50/p99 ${r.busy.p50}/${r.busy.p99} ms (× ${ratio(r.busy.p50, r.idle.p50)}), ${r.busyUndelivered} undelivered; ` +
  `A's ${z.burst.events} events over ${z.burst.configs} configs written in ${r.writtenS} s, ${r.burstDelivered} delivered, last ${r.burstDrainS} s after the first write; A's jobs ${JSON.stringify(r.burstJobs)}, their workflows started (after A's first write) ${r.burstStarts}; B's stages during the burst (ms) ${JSON.stringify(r.busyStages)}; in Temporal and the worker (ms, from B's histories) ${JSON.stringify(r.busyTemporal)}, idle ${JSON.stringify(r.idleTemporal)}; B's p50 by stretch of its stream: ${r.busyTimeline}; B's slowest (offset: total ms (written, → started, → attempt, → seen)): ${r.busySlowest}.`;

/** A (d) or (e) run's two chart rows: B's p50 idle and in the burst, under `short`. */
const fairnessChart = (short: string, r: FairnessRun): ChartRow[] => [
  { bench: '9 fairness', series: `${short} idle`, metric: 'p50', value: r.idle.p50, unit: 'ms' },
  { bench: '9 fairness', series: `${short} in burst`, metric: 'p50', value: r.busy.p50, unit: 'ms' },
];

/** A stage's p50 from `temporalStagesOf` (NaN when the histories could not be read). */
const stageP50 = (t: Record<string, unknown>, stage: string) => {
  const v = t[`${stage} p50`];
  return typeof v === 'number' ? v : NaN;
};

const within = (v: number, want: number, tol: number) => Math.abs(v - want) <= tol * want;

export const isolationBenchmark: Benchmark = {
  name: 'isolation',
  title:
    '9. Isolation: a dead, many dead and a slow host beside a healthy stream; a tenant burst beside another tenant',
  async run(ctx) {
    const z = sizes(ctx.quick);
    const figures: Figure[] = [];
    const chart: ChartRow[] = [];
    const notes: string[] = [];
    const bench = '9 isolation';
    const want = round(HOST_BOUND / (DELIVERY_TIMEOUT_MS / 1000), 2);

    // BENCH9_SCENARIOS=d (or a,c, ...): only those scenarios, for a look at one of them (default: all).
    const wanted = new Set((process.env.BENCH9_SCENARIOS ?? 'a,b,c,d,e').split(','));
    const hostRuns = wanted.has('a') || wanted.has('b') || wanted.has('c');
    ctx.log(hostRuns ? `healthy stream alone for ${z.streamS} s` : 'scenarios (a)-(c) skipped');
    const alone = hostRuns
      ? await healthyAlone(ctx, z.streamS, z.waitMs)
      : { lat: latency([]), undelivered: 0, failed: 0, sent: 0 };
    const base50 = { label: 'healthy stream alone p50', value: alone.lat.p50 };
    const base99 = { label: 'alone p99', value: alone.lat.p99 };
    chart.push(
      { bench, series: 'healthy alone', metric: 'p50', value: alone.lat.p50, unit: 'ms' },
      { bench, series: 'healthy alone', metric: 'p99', value: alone.lat.p99, unit: 'ms' },
    );

    const loop = (n: number) => Array.from({ length: n }, (_, i) => `127.0.1.${i + 1}`);
    const scenarios: Array<HostScenario & { label: string; short: string; p50x: number; p99x?: number }> = [
      {
        key: 'a',
        label: '(a) 1 dead host',
        short: '(a) 1 dead host',
        hosts: loop(1),
        perHost: z.deadConfigs,
        mode: { kind: 'hole' },
        refill: false,
        p50x: 1.5,
        p99x: 2,
      },
      {
        key: 'b',
        label: `(b) ${z.deadHosts} dead hosts`,
        short: `(b) ${z.deadHosts} dead`,
        hosts: loop(z.deadHosts),
        perHost: z.deadConfigs / z.deadHosts,
        mode: { kind: 'hole' },
        refill: false,
        p50x: 2,
      },
      {
        key: 'c',
        label: '(c) host answering after 10 s',
        short: '(c) slow host',
        hosts: ['127.0.2.1'],
        perHost: z.slowConfigs,
        mode: { kind: 'slow', delayMs: 10_000 },
        refill: true,
        p50x: 1.5,
      },
    ];
    const details: Record<string, unknown> = { sizes: z, env: ENV, alone };
    for (const s of scenarios) {
      if (!wanted.has(s.key)) continue;
      const r = await hostScenario(ctx, s, z.streamS, z.waitMs);
      details[s.key] = r;
      figures.push(
        figure(`${s.label}: healthy event → POST p50`, r.healthy.p50, 'ms', base50, {
          text: `p50 ≤ ${s.p50x} × alone`,
          met: r.healthy.p50 <= s.p50x * alone.lat.p50,
        }),
        figure(
          `${s.label}: healthy event → POST p99`,
          r.healthy.p99,
          'ms',
          base99,
          s.p99x !== undefined
            ? { text: `p99 ≤ ${s.p99x} × alone`, met: r.healthy.p99 <= s.p99x * alone.lat.p99 }
            : undefined,
        ),
      );
      figures.push(
        figure(
          `${s.label}: healthy event → POST p99 without the stream's first 10 s (diagnostic)`,
          r.healthyAfterFirst10s.p99,
          'ms',
          base99,
        ),
      );
      if (s.key === 'a')
        figures.push(
          figure(
            `${s.label}: requests the dead host received per second`,
            r.rate.rate,
            '/s',
            { label: `bound ${HOST_BOUND} ÷ DELIVERY_TIMEOUT 15 s`, value: want },
            { text: 'within ±20 % of bound ÷ timeout', met: within(r.rate.rate, want, 0.2) },
          ),
        );
      else
        figures.push(
          figure(
            `${s.label}: requests the ${s.key === 'b' ? 'dead hosts' : 'slow host'} received per second`,
            r.rate.rate,
            '/s',
          ),
        );
      figures.push(
        figure(
          `${s.label}: jobs (of ${r.jobs}) without a final status after the recovery`,
          r.lost,
          'jobs',
          undefined,
          { text: 'none lost', met: r.lost === 0 && r.jobs > 0 && r.healthyUndelivered === 0 },
        ),
        figure(`${s.label}: recovery → every job final`, r.allFinalS, 's'),
      );
      chart.push(
        { bench, series: s.short, metric: 'p50', value: r.healthy.p50, unit: 'ms' },
        { bench, series: s.short, metric: 'p99', value: r.healthy.p99, unit: 'ms' },
      );
      notes.push(
        `${s.label}: ${r.jobs} jobs of tenant A over ${s.hosts.length} host(s) (${s.perHost} configs each, written in ${r.writtenS} s)` +
          `${s.refill ? `, each config's next event written when the host answered one (${r.refills} more, ${r.refillFailures} refused)` : ''}; ` +
          `healthy stream: ${r.healthySent} events, ${r.healthyUndelivered} undelivered, ${r.healthyFailedWrites} writes refused, all seen ${r.heldAfterStreamS} s after it ended; ` +
          `host(s) received ${r.requestsWhileBad} requests before recovering (${r.rate.count} in the first ${r.rate.windowS} s); final statuses ${JSON.stringify(r.final)}. ` +
          `Slowest healthy events (offset in the stream: total ms (written, → started, → attempt, → seen)): ${r.healthySlowest}.`,
      );
    }

    if (wanted.has('d')) {
      // BENCH9_FAIRNESS=on: (d) with fairness on only, for a quicker look at a change (the off figures
      // then repeat the on run's and say so).
      const onlyOn = process.env.BENCH9_FAIRNESS === 'on';
      const fair: FairnessRun[] = [];
      for (const on of onlyOn ? [true] : [false, true]) fair.push(await fairnessRun(ctx, on, z));
      const [off, on] = (onlyOn ? [fair[0], fair[0]] : fair) as [(typeof fair)[0], (typeof fair)[0]];
      if (onlyOn)
        notes.push('BENCH9_FAIRNESS=on: (d) ran with fairness on only; its "off" figures are the on run.');
      details.d = { off, on };
      figures.push(
        figure(
          "(d) tenant B p50 during A's burst, fairness on",
          on.busy.p50,
          'ms',
          {
            label: 'B idle p50 (same dev server)',
            value: on.idle.p50,
          },
          { text: 'p50 ≤ 5 × idle', met: on.busy.p50 <= 5 * on.idle.p50 && on.busyUndelivered === 0 },
        ),
        figure("(d) tenant B p50 during A's burst, fairness off", off.busy.p50, 'ms', {
          label: 'B idle p50 (same dev server)',
          value: off.idle.p50,
        }),
        figure("(d) tenant B p99 during A's burst, fairness on / off", on.busy.p99, 'ms', {
          label: 'fairness off',
          value: off.busy.p99,
        }),
        figure("(d) A's burst: write → last delivery, fairness on / off", on.burstDrainS, 's', {
          label: 'fairness off',
          value: off.burstDrainS,
        }),
      );
      for (const r of fair) {
        const series = `(d) fairness ${r.fairness ? 'on' : 'off'}`;
        chart.push(...fairnessChart(`(d) ${r.fairness ? 'on' : 'off'}: B`, r));
        notes.push(fairnessNote(series, r, z));
      }
    }
    // (e): (d) with fairness on, each B delivery on its second try. No target of its own: it measures
    // what (d) does not, B's second workflow task while A's burst drains (a cached run's task goes to
    // the worker's sticky queue; after 10 s there, to the task queue). Note that its stages' "attempt →
    // seen" then spans the retry wait, the second task's queue and its run.
    if (wanted.has('e')) {
      const r = await fairnessRun(ctx, true, z, true);
      details.e = r;
      figures.push(
        figure("(e) tenant B p50 during A's burst, each B delivery on its second try", r.busy.p50, 'ms', {
          label: 'B idle p50, second try too (same dev server)',
          value: r.idle.p50,
        }),
        figure(
          "(e) B's second workflow task, scheduled → started p50 during A's burst",
          stageP50(r.busyTemporal, 'task2 queue'),
          'ms',
          {
            label: 'idle',
            value: stageP50(r.idleTemporal, 'task2 queue'),
          },
        ),
      );
      chart.push(...fairnessChart('(e) second try: B', r));
      notes.push(fairnessNote('(e) each B delivery on its second try, fairness on', r, z));
    }
    notes.unshift(
      `Healthy stream: tenant B (its own API key), one event every 0.5 s for ${z.streamS} s round-robin over ${HEALTHY_TASKS} tasks (one config each, to the bench receiver on 127.0.0.1); event → POST = write sent → the receiver saw the POST. Baseline: the same stream alone on a fresh sender before (a), same dev server.`,
      `Each of (a)-(c) runs on a fresh sender (database, api, worker) on the run's dev server; tenant A's hosts are distinct loopback addresses (127.0.1.x dead, 127.0.2.1 slow, 127.0.3.1 the burst's), each its own HTTPS server. A held healthy stream keeps the host(s) misbehaving until every healthy event arrived; then they answer 200 at once.`,
      `Settings: ${JSON.stringify(ENV)}; DELIVERY_TIMEOUT 15 s (default). The dead-host rate counts requests the black hole received (undici's 32 connections per origin cap what reaches it on code without a host bound).`,
      `(d) runs twice, each on its own dev server with matching.enableFairness=false / true; B idle first (one event a second), then A's burst, then B one a second until A's burst is delivered. (e) is (d) with fairness on, on a dev server of its own, and B's receiver answering 503 to each B event's first POST and 200 to its second.`,
    );
    return { name: this.name, title: this.title, figures, chart, notes, details };
  },
};
