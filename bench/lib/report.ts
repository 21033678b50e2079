import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** One printed figure: a value of ours (or a measurement) beside its baseline in the same run. */
export interface Figure {
  label: string;
  value: number;
  unit: string;
  baseline?: { label: string; value: number };
  /** value / baseline */
  ratio?: number;
  /** The target, in words, and whether this run met it. */
  target?: string;
  met?: boolean;
}

/** A chart row: one bar (throughput) or one latency percentile of one series. */
export interface ChartRow {
  bench: string;
  series: string;
  metric: 'throughput' | 'p50' | 'p99';
  value: number;
  unit: string;
}

/** A series' p50 and p99 (ms) as two chart rows. */
export const latencyRows = (bench: string, series: string, l: { p50: number; p99: number }): ChartRow[] => [
  { bench, series, metric: 'p50', value: l.p50, unit: 'ms' },
  { bench, series, metric: 'p99', value: l.p99, unit: 'ms' },
];

export interface BenchResult {
  name: string;
  title: string;
  figures: Figure[];
  chart: ChartRow[];
  notes: string[];
  /**
   * DELIVERY_ORDER given to the service processes the benchmark started, distinct, in the order first
   * started (set by the runner; empty when it started none). Where there are two, its figures name
   * the mode they were measured under.
   */
  deliveryOrder?: string[];
  /** Anything else worth keeping in the JSON (raw numbers, settings used). */
  details?: Record<string, unknown>;
  elapsedS?: number;
  error?: string;
}

export function figure(
  label: string,
  value: number,
  unit: string,
  baseline?: { label: string; value: number },
  target?: { text: string; met: boolean },
): Figure {
  const f: Figure = { label, value, unit };
  if (baseline) {
    f.baseline = baseline;
    f.ratio = baseline.value > 0 ? Math.round((value / baseline.value) * 100) / 100 : NaN;
  }
  if (target) {
    f.target = target.text;
    f.met = target.met;
  }
  return f;
}

export function printFigure(bench: string, f: Figure): void {
  // A zero baseline (e.g. no failed answers) has no ratio: "–" rather than NaN.
  const r = f.ratio === undefined || Number.isNaN(f.ratio) ? '–' : f.ratio;
  const base = f.baseline ? `  vs ${f.baseline.label} ${f.baseline.value} ${f.unit}  ratio ${r}` : '';
  const target = f.target ? `  [target ${f.target}: ${f.met ? 'met' : 'MISSED'}]` : '';
  process.stdout.write(`${bench.padEnd(14)} ${f.label}: ${f.value} ${f.unit}${base}${target}\n`);
}

export function machine() {
  const cpus = os.cpus();
  return {
    host: os.hostname(),
    cpus: cpus.length,
    cpuModel: cpus[0]?.model ?? 'unknown',
    memGiB: Math.round(os.totalmem() / 2 ** 30),
    loadavgAtStart: os.loadavg().map((l) => Math.round(l * 100) / 100),
    node: process.version,
    platform: `${os.type()} ${os.release()}`,
  };
}

export function writeResults(dir: string, stamp: string, doc: unknown): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${stamp}.json`);
  fs.writeFileSync(file, JSON.stringify(doc, null, 2) + '\n');
  return file;
}
