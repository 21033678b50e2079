import { orderNote, runDeliveryThroughput, type DeliveryThroughputResult } from './1-delivery';
import type { Benchmark, BenchContext } from './lib/context';
import { figure, type BenchResult, type ChartRow } from './lib/report';
import { freshDatabase, type DeliveryOrder } from './lib/stack';
import { latency, round } from './lib/util';

/** Events on the one config, written back to back (one write in flight). The same in --quick. */
const N = 200;
/** OUTBOX_BOUND_PER_CONFIG for the run: above N, so that no event is superseded. */
const BOUND = String(N * 5);

/**
 * Benchmark 10 (issue 20): N events back to back on ONE config, under DELIVERY_ORDER=per_config (a
 * line: each job's first attempt waits until the job before it ended) and none (every job at once),
 * in the same run, on the run's dev server; each mode on a fresh database with api and worker processes
 * of its own. Deliveries/s of both, their ratio, and what the receiver saw of X-A2A-Push-Sequence:
 * arrivals out of order, resends, numbers never seen. No target: the issue asks for the figures.
 */
export const orderBenchmark: Benchmark = {
  name: 'order',
  title: `10. Ordered delivery: ${N} events back to back on one config, per_config vs none`,
  async run(ctx: BenchContext): Promise<BenchResult> {
    const temporal = await ctx.temporal();
    const receiver = ctx.receiver;
    const runs = {} as Record<DeliveryOrder, DeliveryThroughputResult>;
    // A write in flight at a time: the events' write order is their commit order and their numbers.
    for (const order of ['per_config', 'none'] as const) {
      ctx.log(`DELIVERY_ORDER=${order}: ${N} events on one config, one write in flight`);
      runs[order] = await runDeliveryThroughput({
        temporalAddress: temporal.address,
        n: N,
        tasks: 1,
        concurrency: 1,
        databaseUrl: await freshDatabase(ctx.pg),
        receiver,
        serverPid: temporal.pid,
        env: { DELIVERY_ORDER: order, OUTBOX_BOUND_PER_CONFIG: BOUND },
        // A shortfall is a result here: what arrived in 10 minutes is reported.
        timeoutMs: 600_000,
        partial: true,
      });
    }
    const pc = runs.per_config;
    const none = runs.none;

    // Event i was the i-th write, so the number it carries should be i + 1 (a fresh config).
    const numberedInWriteOrder = (r: DeliveryThroughputResult) => {
      let wrong = 0;
      for (const a of receiver.sequenced) {
        if (!a.path.startsWith(`/hook/${r.runId}-task-`) || a.id === undefined) continue;
        if (a.seq !== Number(a.id.slice(r.runId.length + 1)) + 1) wrong++;
      }
      return wrong;
    };
    /** Time between consecutive POSTs the receiver read for the run (a lost wake shows as ≥ 30 s). */
    const gaps = (r: DeliveryThroughputResult) => {
      const at = receiver.sequenced
        .filter((a) => a.path.startsWith(`/hook/${r.runId}-task-`))
        .map((a) => a.at);
      const between = at.slice(1).map((t, i) => t - at[i]!);
      return { p50: latency(between).p50, longest: between.length > 0 ? Math.max(...between) : NaN };
    };
    const inOrder = (r: DeliveryThroughputResult) =>
      r.delivered === r.n && r.order.outOfOrder === 0 && r.order.duplicates === 0 && r.order.gaps === 0;
    /** CPU ms per delivered event, over the run's CPU window. */
    const cpuPer = (cores: number | undefined, r: DeliveryThroughputResult) =>
      cores === undefined || r.delivered === 0 ? NaN : round((cores * r.cpuWindowMs) / r.delivered, 2);

    const bench = '10 order (1 config)';
    const chart: ChartRow[] = [
      { bench, series: 'per_config', metric: 'throughput', value: pc.deliveriesPerSec, unit: 'deliveries/s' },
      { bench, series: 'none', metric: 'throughput', value: none.deliveriesPerSec, unit: 'deliveries/s' },
      { bench, series: 'per_config', metric: 'p50', value: pc.latencyMs.p50, unit: 'ms' },
      { bench, series: 'per_config', metric: 'p99', value: pc.latencyMs.p99, unit: 'ms' },
      { bench, series: 'none', metric: 'p50', value: none.latencyMs.p50, unit: 'ms' },
      { bench, series: 'none', metric: 'p99', value: none.latencyMs.p99, unit: 'ms' },
    ];
    const each = (r: DeliveryThroughputResult, order: DeliveryOrder) =>
      `${order}: ${r.delivered} of ${r.n} delivered in ${round(r.elapsedMs / 1000, 1)} s (writes done in ` +
      `${round(r.writesMs / 1000, 1)} s, ${r.writeRefusals} answered 503 and retried, ${r.writeFailures} failed); ` +
      `receiver: ${orderNote(r.order)}; ${numberedInWriteOrder(r)} numbers not in write order; ` +
      `in order: ${inOrder(r) ? 'yes' : 'NO'}; POST after POST p50 ${gaps(r).p50} ms, longest ${gaps(r).longest} ms; p50 per stage (ms): ${JSON.stringify(r.stages ?? {})}`;
    return {
      name: this.name,
      title: this.title,
      figures: [
        figure('per_config deliveries/s', pc.deliveriesPerSec, '/s', {
          label: 'none',
          value: none.deliveriesPerSec,
        }),
        figure('per_config delivered', pc.delivered, `of ${N}`, { label: 'none', value: none.delivered }),
        figure('per_config arrivals out of order', pc.order.outOfOrder, 'POSTs'),
        figure('per_config resent (duplicate numbers)', pc.order.duplicates, 'POSTs'),
        figure('none arrivals out of order', none.order.outOfOrder, 'POSTs'),
        figure('none resent (duplicate numbers)', none.order.duplicates, 'POSTs'),
        figure('per_config event → POST p50', pc.latencyMs.p50, 'ms', {
          label: 'none',
          value: none.latencyMs.p50,
        }),
        figure('per_config event → POST p99', pc.latencyMs.p99, 'ms', {
          label: 'none',
          value: none.latencyMs.p99,
        }),
        figure('per_config worker CPU per delivery', cpuPer(pc.cpu.workersTotal, pc), 'ms', {
          label: 'none',
          value: cpuPer(none.cpu.workersTotal, none),
        }),
        figure('per_config dev server CPU per delivery', cpuPer(pc.cpu.server, pc), 'ms', {
          label: 'none',
          value: cpuPer(none.cpu.server, none),
        }),
      ],
      chart,
      notes: [
        each(pc, 'per_config'),
        each(none, 'none'),
        `${N} events on one task with one config, written one after another (one write in flight), ` +
          `OUTBOX_BOUND_PER_CONFIG=${BOUND} so that none is superseded; per_config first, then none, each on a ` +
          "fresh database with api and worker processes of its own, on the run's dev server. deliveries/s = " +
          'delivered ÷ (first write sent → last POST accepted). Out of order: a POST whose ' +
          'X-A2A-Push-Sequence is below one the receiver had already read for that config. No target.',
      ],
      details: { n: N, boundPerConfig: Number(BOUND), perConfig: pc, none },
    };
  },
};
