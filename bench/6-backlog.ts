import { Client as PgClient } from 'pg';
import { request } from 'undici';
import { ApiClient, eventPlan } from './lib/api';
import type { Benchmark } from './lib/context';
import { startBenchReceiver } from './lib/receiver';
import { figure } from './lib/report';
import { startSender } from './lib/stack';
import { pool, round, rssMiB, settledWithin, sleep } from './lib/util';

/** Job counts by status for the run's tasks. */
async function statusCounts(pg: PgClient, prefix: string): Promise<Record<string, number>> {
  const r = await pg.query<{ status: string; n: string }>(
    `SELECT status, count(*) AS n FROM delivery_jobs WHERE task_id LIKE $1 GROUP BY status`,
    [`${prefix}-%`],
  );
  return Object.fromEntries(r.rows.map((x) => [x.status, Number(x.n)]));
}

/** A job still open: the database has not recorded an outcome for it. */
const OPEN = new Set(['queued', 'in_flight', 'waiting_retry']);

/** Each of the run's jobs with the benchmark id of its event (one job per event: one config per task). */
async function jobsByEvent(pg: PgClient, prefix: string): Promise<Map<string, string[]>> {
  const r = await pg.query<{ id: string | null; status: string }>(
    `SELECT substring(e.body from '"bench":\\s*"([^"]+)"') AS id, j.status
       FROM delivery_jobs j JOIN task_events e ON e.id = j.event_id
      WHERE j.task_id LIKE $1`,
    [`${prefix}-%`],
  );
  const m = new Map<string, string[]>();
  for (const row of r.rows) if (row.id) m.set(row.id, [...(m.get(row.id) ?? []), row.status]);
  return m;
}

/** The worker's main-thread V8 heap (prom-client's default metrics on its /metrics), in MiB. */
interface WorkerHeap {
  heapTotal: number;
  heapUsed: number;
  external: number;
}

async function workerHeap(metricsUrl: string): Promise<WorkerHeap | undefined> {
  try {
    const r = await request(metricsUrl);
    const text = await r.body.text();
    const get = (name: string) => {
      const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'm').exec(text);
      return m ? round(Number(m[1]) / 2 ** 20) : NaN;
    };
    return {
      heapTotal: get('nodejs_heap_size_total_bytes'),
      heapUsed: get('nodejs_heap_size_used_bytes'),
      external: get('nodejs_external_memory_bytes'),
    };
  } catch {
    return undefined;
  }
}

/** What the worker's RSS was made of when it peaked: its main-thread V8 heap, and the rest. */
interface WorkerPeak extends Partial<WorkerHeap> {
  rss: number;
  /** The highest main-thread heapTotal seen during the phase (not necessarily at the RSS peak). */
  maxHeapTotal: number;
}

/**
 * Peak and last RSS of a few processes, sampled every 500 ms while `during` runs; for the worker also
 * its main-thread V8 heap (from its /metrics), so that the report can say whether a peak is that heap
 * or the rest of the process (the workflow thread's heap, Temporal core, malloc).
 */
async function sampleRss<T>(
  pids: Record<string, number>,
  workerMetricsUrl: string,
  during: () => Promise<T>,
): Promise<{ result: T; peak: Record<string, number>; worker: WorkerPeak }> {
  const peak: Record<string, number> = Object.fromEntries(Object.keys(pids).map((k) => [k, 0]));
  const worker: WorkerPeak = { rss: 0, maxHeapTotal: 0 };
  let sampling = false;
  const take = async () => {
    if (sampling) return;
    sampling = true;
    try {
      for (const [k, pid] of Object.entries(pids)) peak[k] = Math.max(peak[k]!, rssMiB(pid));
      const heap = await workerHeap(workerMetricsUrl);
      const rss = rssMiB(pids.worker!);
      if (heap) worker.maxHeapTotal = Math.max(worker.maxHeapTotal, heap.heapTotal);
      if (rss > worker.rss) Object.assign(worker, { rss }, heap ?? {});
    } finally {
      sampling = false;
    }
  };
  await take();
  const timer = setInterval(() => void take(), 500);
  try {
    const result = await during();
    await take();
    return { result, peak, worker };
  } finally {
    clearInterval(timer);
  }
}

/** "RSS 865 MiB = main-thread heap 300 (used 250) + the rest 565". */
function describeWorker(w: { rss: number } & Partial<WorkerHeap>): string {
  if (w.heapTotal === undefined) return `RSS ${w.rss} MiB (heap not read)`;
  return `RSS ${w.rss} MiB = main-thread V8 heap ${w.heapTotal} (used ${w.heapUsed}, external ${w.external}) + the rest ${round(w.rss - w.heapTotal)} (workflow thread's V8 heap, Temporal core, malloc, code)`;
}

export const backlogBenchmark: Benchmark = {
  name: 'backlog',
  title: '6. Backlog: deliveries waiting in backoff with the receiver down, then the drain',
  async run(ctx) {
    const n = ctx.quick ? 1000 : 10_000;
    const configs = ctx.quick ? 20 : 200;
    // Every job fails its first attempt (connection refused) and waits RETRY_INITIAL × U(0.8, 1.2):
    // long enough for the whole backlog to be written and tried once before the first wait ends.
    const waitS = ctx.quick ? 30 : 300;
    const env = {
      RETRY_INITIAL: `${waitS}s`,
      RETRY_FACTOR: '1',
      RETRY_MAX: `${waitS}s`,
      // 50 events per config: below the bound, so no job is superseded.
      OUTBOX_BOUND_PER_CONFIG: '64',
      // What the benchmark measures is 10,000 jobs each waiting in backoff, which is DELIVERY_ORDER=none:
      // under per_config only each config's head is tried, and its 49 later jobs wait behind it.
      DELIVERY_ORDER: 'none',
    };
    const receiver = await startBenchReceiver();
    const { temporal, databaseUrl, services } = await startSender(ctx, receiver, env);
    const pg = new PgClient({ connectionString: databaseUrl });
    await pg.connect();
    const api = new ApiClient(services.api.url, services.apiKey);
    try {
      const runId = `bl${Date.now().toString(36)}`;
      const tasks = Array.from({ length: configs }, (_, i) => `${runId}-task-${i}`);
      await api.createConfigs(tasks, 1, receiver.url);
      const pids = { worker: services.workers[0]!.pid, 'dev server': temporal.pid, api: services.api.pid };
      // Idle: the processes up, configs made, nothing to deliver; a few seconds to settle.
      await sleep(3000);
      const idle = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, rssMiB(pid)]));
      const metricsUrl = `${services.workers[0]!.url}/metrics`;
      const idleWorker = { rss: idle.worker!, ...(await workerHeap(metricsUrl)) };

      await receiver.down();
      const plan = eventPlan(n, tasks, runId);
      const t0 = Date.now();
      let writeRefusals = 0;
      const backlog = await sampleRss(pids, metricsUrl, async () => {
        await pool(plan, 32, async (e) => {
          writeRefusals += await api.postEventRetrying(e.taskId, e.id);
        });
        const written = Date.now();
        ctx.log(`${n} events written in ${round((written - t0) / 1000)} s; waiting until all are in backoff`);
        // Until every job waits in backoff, or the deadline: how many did is printed, not assumed.
        let counts: Record<string, number> = {};
        await settledWithin(async () => {
          counts = await statusCounts(pg, runId);
          return (counts.waiting_retry ?? 0) === n;
        }, waitS * 3000);
        const allWaiting = Date.now();
        // Hold the backlog a while, sampling RSS, before the receiver comes back.
        await sleep(ctx.quick ? 3000 : 10_000);
        return { writtenS: (written - t0) / 1000, allWaitingS: (allWaiting - t0) / 1000, counts };
      });
      ctx.log(`backlog of ${n} held; receiver back`);
      await receiver.up();
      const up = Date.now();
      // Deadlines, not conditions of the run: what has not arrived or is not recorded by then is lost.
      const drainDeadlineS = waitS * 1.5 + 120;
      const drain = await sampleRss(pids, metricsUrl, async () => {
        await settledWithin(() => plan.every((e) => receiver.delivered.has(e.id)), drainDeadlineS * 1000);
        return Date.now();
      });
      await settledWithin(
        async () => Object.keys(await statusCounts(pg, runId)).every((s) => !OPEN.has(s)),
        60_000,
      );
      const final = await statusCounts(pg, runId);
      const jobs = await jobsByEvent(pg, runId);
      // Lost: an event the receiver never accepted, or whose job the database has not closed (or lacks).
      const notReceived = plan.filter((e) => !receiver.delivered.has(e.id)).length;
      const notClosed = plan.filter((e) => {
        const s = jobs.get(e.id);
        return !s || s.some((x) => OPEN.has(x));
      }).length;
      const lost = plan.filter((e) => {
        const s = jobs.get(e.id);
        return !receiver.delivered.has(e.id) || !s || s.some((x) => OPEN.has(x));
      }).length;
      const arrivals = plan
        .filter((e) => receiver.delivered.has(e.id))
        .map((e) => receiver.delivered.get(e.id)!)
        .sort((a, b) => a - b);
      const firstAfterUp = arrivals[0] ?? up;
      const last = arrivals[arrivals.length - 1] ?? up;
      const drainRate = round((arrivals.length * 1000) / Math.max(1, last - firstAfterUp));
      // The busiest 5 s of the drain: what the system sustains when many timers are due together.
      let busiest = 0;
      for (let i = 0, j = 0; i < arrivals.length; i++) {
        while (arrivals[i]! - arrivals[j]! > 5000) j++;
        busiest = Math.max(busiest, i - j + 1);
      }
      const duplicates = plan.reduce((d, e) => d + Math.max(0, (receiver.seen.get(e.id) ?? 0) - 1), 0);
      const peakBacklog = backlog.peak;
      const bench = '6 backlog';
      return {
        name: this.name,
        title: this.title,
        figures: [
          figure(
            'worker RSS, backlog peak',
            peakBacklog.worker!,
            'MiB',
            { label: 'worker idle', value: idle.worker! },
            { text: 'worker RSS ≤ 2 × idle', met: peakBacklog.worker! <= 2 * idle.worker! },
          ),
          figure(
            'jobs waiting in backoff while the backlog was held',
            backlog.result.counts.waiting_retry ?? 0,
            'jobs',
            {
              label: 'events written',
              value: n,
            },
          ),
          figure('dev server RSS, backlog peak', peakBacklog['dev server']!, 'MiB', {
            label: 'dev server idle',
            value: idle['dev server']!,
          }),
          figure('worker RSS, drain peak', drain.peak.worker!, 'MiB', {
            label: 'worker idle',
            value: idle.worker!,
          }),
          figure('drain rate (first to last delivery after the receiver came back)', drainRate, '/s'),
          figure('drain, busiest 5 s', round(busiest / 5), '/s'),
          figure('lost (not received, or job not closed in the database)', lost, 'deliveries', undefined, {
            text: 'nothing lost',
            met: lost === 0,
          }),
          figure('not received by the receiver', notReceived, 'events'),
          figure('job not closed in the database (or missing)', notClosed, 'events'),
          figure('event writes answered 503 (retried after Retry-After)', writeRefusals, 'answers'),
          figure('receiver up → last delivery', round((last - up) / 1000, 1), 's'),
        ],
        chart: [
          { bench, series: 'worker idle', metric: 'throughput', value: idle.worker!, unit: 'MiB' },
          { bench, series: 'worker backlog', metric: 'throughput', value: peakBacklog.worker!, unit: 'MiB' },
          {
            bench,
            series: 'dev server idle',
            metric: 'throughput',
            value: idle['dev server']!,
            unit: 'MiB',
          },
          {
            bench,
            series: 'dev server backlog',
            metric: 'throughput',
            value: peakBacklog['dev server']!,
            unit: 'MiB',
          },
        ],
        notes: [
          `${n} events over ${configs} configs (one per task, ${n / configs} each, under OUTBOX_BOUND_PER_CONFIG 64); the receiver refused connections; every job's first attempt failed and it waited RETRY_INITIAL=${waitS}s ×U(0.8, 1.2) (RETRY_FACTOR=1 for the run).`,
          `written in ${round(backlog.result.writtenS)} s; all ${n} waiting after ${round(backlog.result.allWaitingS)} s; held ${ctx.quick ? 3 : 10} s more; then the receiver came back.`,
          `The drain follows the jobs' timers (spread by when each failed and by jitter), not only the system's speed; the busiest 5 s shows the rate when many are due together.`,
          `idle RSS (MiB): ${JSON.stringify(idle)}; backlog peak: ${JSON.stringify(peakBacklog)}; drain peak: ${JSON.stringify(drain.peak)}.`,
          `worker idle: ${describeWorker(idleWorker)}.`,
          `worker at its backlog peak: ${describeWorker(backlog.worker)}; main-thread heap at most ${backlog.worker.maxHeapTotal} MiB in the phase.`,
          `worker at its drain peak: ${describeWorker(drain.worker)}; main-thread heap at most ${drain.worker.maxHeapTotal} MiB in the phase.`,
          `lost counted ${drainDeadlineS} s after the receiver came back (+ up to 60 s for the database to close the jobs): ${notReceived} events not accepted by the receiver, ${notClosed} without a closed job; job statuses at the end: ${JSON.stringify(final)}.`,
          `receiver saw ${duplicates} requests beyond one per event after it came back (0 expected: refused ones are not seen).`,
        ],
        details: {
          n,
          configs,
          waitS,
          idle,
          idleWorker,
          backlog,
          drain: { peak: drain.peak, worker: drain.worker, drainRate, busiest },
          final,
        },
      };
    } finally {
      await api.close();
      await pg.end();
      await services.stop();
      await receiver.close();
    }
  },
};
