import path from 'node:path';
import { Client as PgClient } from 'pg';
import { request } from 'undici';
import { ApiClient } from './lib/api';
import type { Benchmark, BenchContext } from './lib/context';
import { failedAnswers, load, type LoadResult } from './lib/load';
import { figure, type ChartRow, type Figure } from './lib/report';
import { freshDatabase, spawnBenchProcess, startBenchTemporal, startServices } from './lib/stack';
import { benchStreamResponse, freePort } from './lib/util';

const TENANT = 'default';
const TASKS = 1000;
const CONNECTIONS = 32;

type Side = 'ours' | 'baseline';

/** One side's run: its load, the jobs it wrote, and the workflows started for them by the end of the load. */
interface SideRun {
  load: LoadResult;
  jobs: number;
  started: number;
  startFailures: number;
}

async function jobCount(databaseUrl: string): Promise<{ jobs: number; dispatched: number }> {
  const c = new PgClient({ connectionString: databaseUrl });
  await c.connect();
  try {
    const r = await c.query<{ jobs: string; dispatched: string }>(
      'SELECT count(*) AS jobs, count(dispatched_at) AS dispatched FROM delivery_jobs',
    );
    return { jobs: Number(r.rows[0]!.jobs), dispatched: Number(r.rows[0]!.dispatched) };
  } finally {
    await c.end();
  }
}

/** `durationS` of event writes round-robin over the run's tasks, each event marked with its own id. */
function writeLoad(url: string, runId: string, apiKey: string | undefined, durationS: number) {
  let seq = 0;
  return load({
    url,
    connections: CONNECTIONS,
    durationS,
    next: () => {
      const t = `${runId}-task-${seq++ % TASKS}`;
      return {
        path: `/v1/tasks/${t}/events`,
        headers: {
          'content-type': 'application/json',
          ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}),
        },
        body: JSON.stringify({ streamResponse: benchStreamResponse(t, `${runId}-${seq}`) }),
      };
    },
  });
}

/**
 * One side on its own database (so neither side's jobs are left for the other's dispatcher) and, with
 * `temporalUp`, its own fresh dev server on this machine (no worker: the write path only).
 * Ours: the api process. Baseline: bare Express + pg (`lib/baseline-server.ts`), starting one bare
 * workflow per job after the answer when Temporal is up; our api only makes its configs, then stops.
 */
async function runSide(
  ctx: BenchContext,
  side: Side,
  perTask: number,
  temporalUp: boolean,
  durationS: number,
): Promise<SideRun> {
  const databaseUrl = await freshDatabase(ctx.pg);
  const runId = `w${perTask}${side[0]}${temporalUp ? 'u' : 'd'}-${Date.now().toString(36)}`;
  const tasks = Array.from({ length: TASKS }, (_, i) => `${runId}-task-${i}`);
  const temporal = temporalUp ? await startBenchTemporal(ctx.dir, 'wal') : undefined;
  const down = `127.0.0.1:${await freePort()}`;
  try {
    // Ours keeps its api for the load; the baseline's api only migrates and makes the configs.
    const services = await startServices({
      dir: ctx.dir,
      databaseUrl,
      temporalAddress: side === 'ours' && temporal ? temporal.address : down,
      caFile: ctx.receiver.tls.caFile,
      start: { inbox: false, workers: false },
      ...(side === 'ours' && temporal ? {} : { env: { SWEEP_INTERVAL: '10m' } }),
    });
    try {
      const api = new ApiClient(services.api.url, services.apiKey, 16);
      await api.createConfigs(tasks, perTask, ctx.receiver.url);
      await api.close();
      if (side === 'ours') {
        ctx.log(`${perTask} config(s)/task, Temporal ${temporalUp ? 'up' : 'unreachable'}: ours`);
        const result = await writeLoad(services.api.url, runId, services.apiKey, durationS);
        const c = await jobCount(databaseUrl);
        return { load: result, jobs: c.jobs, started: c.dispatched, startFailures: 0 };
      }
    } finally {
      await services.stop();
    }
    ctx.log(
      `${perTask} config(s)/task, Temporal ${temporalUp ? 'up' : 'unreachable'}: baseline${temporalUp ? ' (write, then a bare workflow start per job)' : ' (write only)'}`,
    );
    const baseline = await spawnBenchProcess(path.join(__dirname, 'lib', 'baseline-server.ts'), [
      databaseUrl,
      TENANT,
      ...(temporal ? [temporal.address, `bench-baseline-${process.pid}`] : []),
    ]);
    try {
      const url = `http://127.0.0.1:${baseline.ready}`;
      const result = await writeLoad(url, runId, undefined, durationS);
      const stats = (await (await request(`${url}/stats`)).body.json()) as {
        started: number;
        startFailures: number;
      };
      const c = await jobCount(databaseUrl);
      return { load: result, jobs: c.jobs, started: stats.started, startFailures: stats.startFailures };
    } finally {
      await baseline.stop();
    }
  } finally {
    await temporal?.stop();
  }
}

export const eventWriteBenchmark: Benchmark = {
  name: 'event-write',
  title: '3. Event write: POST /v1/tasks/{taskId}/events at 32 concurrent clients over 1,000 tasks',
  async run(ctx) {
    const durationS = ctx.quick ? 5 : 15;
    const figures: Figure[] = [];
    const chart: ChartRow[] = [];
    const details: Record<string, unknown> = {};
    // The targets: Temporal up for both sides, each starting a workflow per job after its answer.
    for (const perTask of [1, 4]) {
      const b = await runSide(ctx, 'baseline', perTask, true, durationS);
      const o = await runSide(ctx, 'ours', perTask, true, durationS);
      details[`${perTask}cfg`] = { ours: o, baseline: b };
      pushFigures(figures, chart, `${perTask} cfg, Temporal up`, o, b, true);
    }
    // The write alone: Temporal unreachable for ours (nothing starts), the baseline without starts.
    const b = await runSide(ctx, 'baseline', 1, false, durationS);
    const o = await runSide(ctx, 'ours', 1, false, durationS);
    details['1cfgTemporalUnreachable'] = { ours: o, baseline: b };
    pushFigures(figures, chart, '1 cfg, Temporal unreachable', o, b, false);
    return {
      name: this.name,
      title: this.title,
      figures,
      chart,
      notes: [
        `autocannon, ${CONNECTIONS} connections, ${durationS} s per run, events round-robin over 1,000 tasks; req/s counts 2xx answers only, latencies are of the 2xx answers.`,
        'Each run has its own database and, with Temporal up, its own fresh dev server (SQLite WAL + synchronous=normal) on this machine, no worker; the other side has no process running meanwhile.',
        'Baseline: bare Express + pg, the same event + job inserts in one transaction (no auth, validation, idempotency, bound or log); with Temporal up it then starts one bare workflow per job after the answer, 32 starts in flight, as ours does.',
        "'workflows started' counts starts done by the end of the load (ours: jobs with dispatched_at; baseline: its client's answered starts): a side that answers faster than it starts leaves the rest for later.",
      ],
      details,
    };
  },
};

function pushFigures(
  figures: Figure[],
  chart: ChartRow[],
  what: string,
  o: SideRun,
  b: SideRun,
  targets: boolean,
) {
  figures.push(
    figure(
      `${what}: ours req/s (2xx)`,
      o.load.rps,
      'req/s',
      { label: 'baseline', value: b.load.rps },
      targets ? { text: '≥ 0.5 × baseline', met: o.load.rps >= 0.5 * b.load.rps } : undefined,
    ),
    figure(`${what}: ours p50`, o.load.p50, 'ms', { label: 'baseline p50', value: b.load.p50 }),
    figure(
      `${what}: ours p99`,
      o.load.p99,
      'ms',
      { label: 'baseline p99', value: b.load.p99 },
      targets ? { text: '≤ 2 × baseline p99', met: o.load.p99 <= 2 * b.load.p99 } : undefined,
    ),
    figure(`${what}: ours failed answers (non-2xx + errors)`, failedAnswers(o.load), 'answers', {
      label: 'baseline',
      value: failedAnswers(b.load),
    }),
  );
  if (targets)
    figures.push(
      figure(
        `${what}: ours workflows started by the end of the load (of ${o.jobs} jobs)`,
        o.started,
        'workflows',
        { label: `baseline (of ${b.jobs} jobs; ${b.startFailures} starts failed)`, value: b.started },
      ),
    );
  const bench = '3 event write';
  chart.push(
    { bench, series: `ours ${what}`, metric: 'throughput', value: o.load.rps, unit: 'req/s' },
    { bench, series: `baseline ${what}`, metric: 'throughput', value: b.load.rps, unit: 'req/s' },
    { bench, series: `ours ${what}`, metric: 'p50', value: o.load.p50, unit: 'ms' },
    { bench, series: `ours ${what}`, metric: 'p99', value: o.load.p99, unit: 'ms' },
    { bench, series: `baseline ${what}`, metric: 'p50', value: b.load.p50, unit: 'ms' },
    { bench, series: `baseline ${what}`, metric: 'p99', value: b.load.p99, unit: 'ms' },
  );
}
