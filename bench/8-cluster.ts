/**
 * Benchmark 8: the delivery benchmark (1) on real Temporal servers over Postgres beside the run's
 * dev server: deliveries/s with 1 and 2 worker processes, on clusters with 4 and 16 history shards
 * (two clusters: the shard count is fixed when a cluster's databases are created), with the CPU of
 * the workers, the api, the Temporal server and the cluster's Postgres.
 *
 * One server at a time: each cluster gets its own embedded Postgres, is started for its rows and
 * stopped before the next, so no row shares the cores or a Postgres with another cluster (the run's
 * dev server, idle, stays up for the other benchmarks). Rows and worker counts:
 * BENCH_CLUSTER_ROWS (default `dev,s4,s16`; `s<N>` a cluster of N shards in one process,
 * `s<N>-split` one process per role), BENCH_CLUSTER_WORKERS (default `1,2`), BENCH_CLUSTER_ROUNDS
 * (default 1; 2 runs every row twice, to see the noise).
 */
import path from 'node:path';
import { ensureClusterBinaries, freePortBlock, startCluster, type Cluster } from '../scripts/cluster/cluster';
import { clusterPostgres } from '../scripts/cluster/postgres';
import {
  runBareThroughput,
  runDeliveryThroughput,
  startBareWorker,
  type DeliveryThroughputResult,
} from './1-delivery';
import type { Benchmark, BenchContext } from './lib/context';
import { figure, type BenchResult, type ChartRow, type Figure } from './lib/report';
import { freshDatabase } from './lib/stack';
import { cpuSeconds, freePort, machineJiffies, postgresCpuSeconds, round } from './lib/util';

export interface Server {
  /** `dev`, `s4`, `s16`, `s4-split` */
  kind: string;
  label: string;
  shards: number;
  address: string;
  namespace: string;
  /** CPU seconds so far of the Temporal server's processes. */
  serverCpu: () => number;
  /** CPU seconds so far of the Postgres holding its history (none for the dev server: SQLite is in-process). */
  storeCpu?: () => number;
  /** Stops what was started for it (a cluster and its Postgres; nothing for the run's dev server). */
  stop: () => Promise<void>;
  /** A cluster's folder (its dynamic config and server logs); none for the dev server. */
  dir?: string;
  /** A cluster's Prometheus listeners, one per server process (its frontend port + 9 on). */
  metricsUrls?: string[];
}

/**
 * The run's dev server, or a cluster of `kind` over a Postgres of its own, started now; a cluster gets
 * `dynamicConfig` (key → list of {value, constraints}) on top of deploy/temporal/dynamicconfig.yaml.
 */
export async function startServer(
  ctx: BenchContext,
  kind: string,
  dynamicConfig?: Record<string, unknown[]>,
): Promise<Server> {
  if (kind === 'dev') {
    const dev = await ctx.temporal();
    return {
      kind,
      label: 'dev server (SQLite WAL)',
      shards: 1,
      address: dev.address,
      namespace: 'default',
      serverCpu: () => cpuSeconds(dev.pid),
      stop: async () => undefined,
    };
  }
  const m = /^s(\d+)(-split)?$/.exec(kind);
  const shards = Number(m?.[1]);
  if (!m || !shards) throw new Error(`BENCH_CLUSTER_ROWS: dev, s<shards> or s<shards>-split, got ${kind}`);
  // Its own Postgres (fsync on, as in production): its CPU is this cluster's alone, apart from the
  // service's, whose databases stay on the run's Postgres for every row.
  const pgDir = path.join(ctx.dir, `cluster-pg-${kind}`);
  const clusterPg = await clusterPostgres({ dir: pgDir, port: await freePort(), log: () => undefined });
  let cluster: Cluster;
  try {
    ctx.log(`starting a ${m[2] ? 'split' : 'single-process'} cluster with ${shards} history shards`);
    cluster = await startCluster({
      shards,
      layout: m[2] ? 'split' : 'single',
      pg: clusterPg.server,
      name: `bench_${kind.replace('-', '_')}_${process.pid}`,
      dir: path.join(ctx.dir, `cluster-${kind}`),
      port: await freePortBlock(),
      log: ctx.log,
      ...(dynamicConfig ? { dynamicConfig } : {}),
    });
  } catch (err) {
    await clusterPg.stop().catch(() => undefined);
    throw err;
  }
  const pids = Object.values(cluster.pids);
  return {
    kind,
    label: `cluster (${cluster.layout === 'single' ? 'one process' : 'one process per role'})`,
    shards,
    address: cluster.address,
    namespace: cluster.namespace,
    serverCpu: () => pids.reduce((s, p) => s + cpuSeconds(p), 0),
    storeCpu: () => postgresCpuSeconds(pgDir),
    dir: cluster.dir,
    // scripts/cluster/cluster.ts: process i of the cluster listens for metrics on its frontend port + 9 + i.
    metricsUrls: Object.keys(cluster.pids)
      .filter((k) => k !== 'ui')
      .map((_, i) => `http://127.0.0.1:${Number(cluster.address.split(':')[1]) + 9 + i}/metrics`),
    stop: async () => {
      await cluster.stop().catch(() => undefined);
      await clusterPg.stop();
    },
  };
}

export interface ClusterRow {
  server: string;
  kind: string;
  shards: number;
  workers: number;
  round: number;
  n: number;
  deliveriesPerSec: number;
  latencyMs: DeliveryThroughputResult['latencyMs'];
  cores: { workers: number; api: number; server: number; postgres: number };
  deliveriesPerCoreSecond: number;
  machineBusyPct: number;
  duplicates: number;
}

const list = (v: string | undefined, dflt: string) =>
  (v ?? dflt)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

export const clusterBenchmark: Benchmark = {
  name: 'cluster',
  title:
    '8. Real Temporal server over Postgres: deliveries/s by history shards and workers, beside the dev server',
  async run(ctx: BenchContext): Promise<BenchResult> {
    const n = ctx.quick ? 200 : 1000;
    const kinds = list(process.env.BENCH_CLUSTER_ROWS, 'dev,s4,s16');
    const workerCounts = list(process.env.BENCH_CLUSTER_WORKERS, '1,2').map(Number);
    const rounds = Number(process.env.BENCH_CLUSTER_ROUNDS ?? 1);
    if (workerCounts.some((w) => !(w >= 1)) || !(rounds >= 1))
      throw new Error('BENCH_CLUSTER_WORKERS: worker counts ≥ 1; BENCH_CLUSTER_ROUNDS ≥ 1');

    const rows: ClusterRow[] = [];
    // The bare workflow (one POSTing activity, benchmark 1's baseline (a)) on each server, after ours.
    const bare = new Map<string, number>();
    // And the floor (benchmark 1's (d)): one local activity, started eagerly from its worker's process.
    // Ours does all of its work and more: a ratio to bare that the floor does not reach is out of reach.
    const floor = new Map<string, { rate: number; eager: number | undefined }>();
    if (kinds.some((k) => k !== 'dev')) ensureClusterBinaries({ log: ctx.log });
    for (const kind of kinds) {
      const srv = await startServer(ctx, kind);
      try {
        for (let round_ = 1; round_ <= rounds; round_++)
          for (const workers of workerCounts) {
            ctx.log(`${srv.kind}, ${workers} worker(s), round ${round_}: ${n} events over 100 tasks`);
            const m0 = machineJiffies();
            const r = await runDeliveryThroughput({
              temporalAddress: srv.address,
              namespace: srv.namespace,
              workers,
              n,
              databaseUrl: await freshDatabase(ctx.pg),
              receiver: ctx.receiver,
              cpuOf: { server: srv.serverCpu, ...(srv.storeCpu ? { postgres: srv.storeCpu } : {}) },
            });
            const m1 = machineJiffies();
            ctx.receiver.reset();
            const cores = {
              workers: r.cpu.workersTotal,
              api: r.cpu.api,
              server: r.cpu.more.server ?? NaN,
              postgres: r.cpu.more.postgres ?? 0,
            };
            const row: ClusterRow = {
              server: srv.label,
              kind: srv.kind,
              shards: srv.shards,
              workers,
              round: round_,
              n,
              deliveriesPerSec: r.deliveriesPerSec,
              latencyMs: r.latencyMs,
              cores,
              deliveriesPerCoreSecond: round(
                r.deliveriesPerSec / (cores.workers + cores.api + cores.server + cores.postgres),
              ),
              machineBusyPct: Math.round((100 * (m1.busy - m0.busy)) / (m1.total - m0.total)),
              duplicates: r.duplicates,
            };
            rows.push(row);
            ctx.log(
              `${row.deliveriesPerSec}/s; cores worker ${cores.workers} api ${cores.api} server ${cores.server} postgres ${cores.postgres}; machine ${row.machineBusyPct}% busy; ${row.duplicates} duplicates; writes took ${r.writesMs} ms (${r.writeRefusals} answered 503 and sent again); p50 per stage (ms) ${JSON.stringify(r.stages ?? {})}; slowest (write → dispatched / → first attempt / → finished) ${(r.tail?.slowest ?? []).join('; ')}`,
            );
          }
        for (const shape of ['classic', 'lean'] as const) {
          ctx.log(
            `${srv.kind}: the bare ${shape === 'lean' ? 'lean workflow (the floor)' : 'workflow'}, ${n} starts`,
          );
          const bw = await startBareWorker(srv.address, ctx.receiver, srv.namespace, shape);
          try {
            const r = await runBareThroughput(bw, ctx.receiver, n);
            if (shape === 'lean') floor.set(srv.kind, { rate: r.deliveriesPerSec, eager: r.eager });
            else bare.set(srv.kind, r.deliveriesPerSec);
          } finally {
            await bw.stop();
            ctx.receiver.reset();
          }
        }
      } finally {
        await srv.stop();
      }
    }

    const serverName = (r: ClusterRow) =>
      r.kind === 'dev' ? 'dev server' : `${r.shards} shards${r.kind.endsWith('-split') ? ' split' : ''}`;
    const name = (r: ClusterRow) => `${serverName(r)}, ${r.workers}w${rounds > 1 ? ` r${r.round}` : ''}`;
    const figures: Figure[] = [];
    const chart: ChartRow[] = [];
    // Issue 21's targets, ours (1 worker) ÷ the bare workflow on the same server: ≥ 1.5 on the dev
    // server, ≥ 1.3 on the 4-shard cluster; the other rows are printed beside them.
    const bareTarget: Record<string, number> = { dev: 1.5, s4: 1.3 };
    for (const r of rows.filter((x) => x.workers === 1 && bare.has(x.kind))) {
      const b = bare.get(r.kind)!;
      const t = bareTarget[r.kind];
      figures.push(
        figure(
          `${name(r)} deliveries/s`,
          r.deliveriesPerSec,
          '/s',
          { label: 'bare workflow, same server', value: b },
          t !== undefined
            ? { text: `≥ ${t} × bare (issue 21)`, met: r.deliveriesPerSec >= t * b }
            : undefined,
        ),
      );
      const f = floor.get(r.kind)?.rate;
      // Once per server (its first round's row), as the floor ran once per server.
      if (f !== undefined && r.round === 1)
        figures.push(
          figure(`floor: bare lean workflow on the ${serverName(r)} deliveries/s`, f, '/s', {
            label: 'bare workflow, same server',
            value: b,
          }),
          figure(`${name(r)} deliveries/s`, r.deliveriesPerSec, '/s', {
            label: 'floor: bare lean workflow, same server',
            value: f,
          }),
        );
    }
    for (const r of rows) {
      const dev = rows.find((d) => d.kind === 'dev' && d.workers === r.workers && d.round === r.round);
      const base =
        dev && dev !== r ? { label: `dev server, ${r.workers}w`, value: dev.deliveriesPerSec } : undefined;
      figures.push(figure(`${name(r)} deliveries/s`, r.deliveriesPerSec, '/s', base));
      figures.push(
        figure(
          `${name(r)} deliveries per core-second`,
          r.deliveriesPerCoreSecond,
          '/core-s',
          dev && dev !== r ? { label: 'dev server', value: dev.deliveriesPerCoreSecond } : undefined,
        ),
      );
      chart.push({
        bench: '8 cluster',
        series: name(r),
        metric: 'throughput',
        value: r.deliveriesPerSec,
        unit: 'deliveries/s',
      });
    }
    const table = [
      '| Temporal | history shards | workers | deliveries/s | event → POST p50 / p99 ms | worker cores | api cores | server cores | Postgres cores | deliveries per core-second | machine busy | duplicates |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|',
      ...rows.map(
        (r) =>
          `| ${r.server} | ${r.shards} | ${r.workers} | ${r.deliveriesPerSec} | ${r.latencyMs.p50} / ${r.latencyMs.p99} | ${r.cores.workers} | ${r.cores.api} | ${r.cores.server} | ${r.kind === 'dev' ? '–' : r.cores.postgres} | ${r.deliveriesPerCoreSecond} | ${r.machineBusyPct}% | ${r.duplicates} |`,
      ),
    ];
    return {
      name: this.name,
      title: this.title,
      figures,
      chart,
      notes: [
        `${n} events over 100 tasks (one config each), 32 event writes in flight, as in benchmark 1; every row has fresh api and worker processes and a fresh service database on the run's Postgres.`,
        "The clusters are Temporal server (built from its Go module), each over an embedded Postgres of its own (fsync on), one at a time: a cluster runs only during its own rows; 'Postgres cores' is its Postgres's CPU (the dev server keeps SQLite in its own process). The run's dev server stays up, idle, during the cluster rows.",
        'per core-second: deliveries/s over the cores of workers + api + Temporal server + its Postgres.',
        `bare workflow on each server (deliveries/s): ${[...bare].map(([k, v]) => `${k} ${v}`).join(', ')}; the floor, bare lean (one local activity, started eagerly from its worker's process): ${[...floor].map(([k, v]) => `${k} ${v.rate} (eager starts ${v.eager ?? '?'} of ${n})`).join(', ')}.`,
        `duplicates (POSTs beyond the first per event): ${rows.map((r) => r.duplicates).reduce((a, b) => a + b, 0)} in all.`,
        ...table,
      ],
      details: { rows },
    };
  },
};
