/**
 * `npm run bench [-- --quick] [--only=name,name]`: every benchmark beside its baselines, in one run on
 * one machine. Prints one line per figure with its ratio, writes bench/results/<date>.json and a chart.
 * `npm run bench -- --chart=bench/results/<date>.json` draws a run's chart again.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { deliveryBenchmark } from './1-delivery';
import { storesBenchmark } from './2-stores';
import { eventWriteBenchmark } from './3-event-write';
import { inboxBenchmark } from './4-inbox';
import { failureBenchmark } from './5-failure';
import { backlogBenchmark } from './6-backlog';
import { idleLatencyBenchmark } from './7-idle-latency';
import { clusterBenchmark } from './8-cluster';
import { isolationBenchmark } from './9-isolation';
import { orderBenchmark } from './10-order';
import { steadyBenchmark } from './11-steady';
import { drawChart } from './lib/chart';
import type { BenchContext, BenchTemporal, Benchmark } from './lib/context';
import { startBenchReceiver } from './lib/receiver';
import { machine, printFigure, writeResults, type BenchResult } from './lib/report';
import {
  defaultDeliveryOrder,
  scratchDir,
  startBenchPostgres,
  startBenchTemporal,
  takeDeliveryOrders,
  benchDeliveryWorkflow,
  benchLayout,
} from './lib/stack';

const ALL: Benchmark[] = [
  deliveryBenchmark,
  storesBenchmark,
  eventWriteBenchmark,
  inboxBenchmark,
  failureBenchmark,
  backlogBenchmark,
  idleLatencyBenchmark,
  clusterBenchmark,
  isolationBenchmark,
  orderBenchmark,
  steadyBenchmark,
];

/** `--chart=bench/results/<date>.json`: draws that run's chart again (after a change to the chart). */
async function redraw(json: string) {
  const doc = JSON.parse(fs.readFileSync(json, 'utf8')) as {
    startedAt: string;
    quick: boolean;
    machine: { cpus: number };
    results: BenchResult[];
  };
  const charts = await drawChart(
    doc.results.flatMap((r) => r.chart),
    json.replace(/\.json$/, '.svg'),
    `a2a-push benchmarks ${doc.startedAt.slice(0, 16)}Z${doc.quick ? ' (quick)' : ''}, ${doc.machine.cpus} cores`,
  );
  process.stdout.write(`chart: ${charts.join(', ')}\n`);
}

async function main() {
  const args = process.argv.slice(2);
  const chart = args.find((a) => a.startsWith('--chart='))?.slice('--chart='.length);
  if (chart) return redraw(chart);
  const quick = args.includes('--quick');
  const only = args
    .find((a) => a.startsWith('--only='))
    ?.slice('--only='.length)
    .split(',');
  const selected = only ? ALL.filter((b) => only.includes(b.name)) : ALL;
  if (only && selected.length !== only.length)
    throw new Error(`unknown benchmark in --only; names: ${ALL.map((b) => b.name).join(', ')}`);

  const started = new Date();
  const dir = scratchDir();
  const pg = await startBenchPostgres(dir);
  const pgDir = path.join(dir, 'pg');
  const receiver = await startBenchReceiver();
  let temporal: Promise<BenchTemporal> | undefined;
  const ctx: BenchContext = {
    quick,
    dir,
    pg,
    pgDir,
    receiver,
    temporal: () => (temporal ??= startBenchTemporal(dir, 'wal')),
    log: (l) => process.stderr.write(`  … ${l}\n`),
  };
  const info = machine();
  const deliveryOrderDefault = defaultDeliveryOrder();
  const deliveryWorkflow = benchDeliveryWorkflow();
  const layout = benchLayout();
  process.stdout.write(
    `a2a-push benchmarks${quick ? ' (--quick)' : ''}: ${info.cpus} × ${info.cpuModel}, ${info.memGiB} GiB, load ${info.loadavgAtStart.join(' ')}; DELIVERY_ORDER ${deliveryOrderDefault} unless a benchmark sets its own; DELIVERY_WORKFLOW ${deliveryWorkflow}; layout ${layout}\n`,
  );
  const results: BenchResult[] = [];
  for (const b of selected) {
    process.stdout.write(`\n${b.title}\n`);
    const t0 = Date.now();
    takeDeliveryOrders();
    let r: BenchResult;
    try {
      r = await b.run(ctx);
    } catch (err) {
      process.stderr.write(`${b.name} failed: ${(err as Error).stack ?? String(err)}\n`);
      r = { name: b.name, title: b.title, figures: [], chart: [], notes: [], error: (err as Error).message };
    }
    r.elapsedS = Math.round((Date.now() - t0) / 1000);
    // What the service processes were started with (lib/stack.ts), not what the benchmark meant to pass.
    r.deliveryOrder = takeDeliveryOrders();
    process.stdout.write(
      `${b.name.padEnd(14)} DELIVERY_ORDER: ${r.deliveryOrder.length > 0 ? r.deliveryOrder.join(', ') : '(no service process started)'}\n`,
    );
    for (const f of r.figures) printFigure(b.name, f);
    for (const n of r.notes) process.stdout.write(`${''.padEnd(14)} note: ${n}\n`);
    results.push(r);
    ctx.receiver.reset();
  }
  if (temporal) await (await temporal).stop();
  await receiver.close();
  await pg.stop();

  const stamp =
    started.toISOString().replace(/[:]/g, '-').replace(/\..+$/, '') +
    (deliveryWorkflow === 'lean' ? '-lean' : '') +
    (layout === 'combined' ? '-combined' : '') +
    (quick ? '-quick' : '');
  const outDir = path.join(__dirname, 'results');
  const doc = {
    startedAt: started.toISOString(),
    finishedAt: new Date().toISOString(),
    quick,
    deliveryOrderDefault,
    deliveryWorkflow,
    layout,
    machine: { ...info, loadavgAtEnd: os.loadavg().map((l) => Math.round(l * 100) / 100) },
    results,
  };
  const file = writeResults(outDir, stamp, doc);
  const charts = await drawChart(
    results.flatMap((r) => r.chart),
    path.join(outDir, `${stamp}.svg`),
    `a2a-push benchmarks ${started.toISOString().slice(0, 16)}Z${quick ? ' (quick)' : ''}, ${info.cpus} cores`,
  );
  process.stdout.write(
    `\nresults: ${path.relative(process.cwd(), file)}; chart: ${charts.map((c) => path.relative(process.cwd(), c)).join(', ')}\n`,
  );
  const failed = results.filter((r) => r.error);
  process.exit(failed.length > 0 ? 1 : 0);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
