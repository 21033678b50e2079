import fs from 'node:fs';
import path from 'node:path';
import * as vega from 'vega';
import * as vl from 'vega-lite';
import type { ChartRow } from './report';

/**
 * One SVG per run (and a PNG rendered from it): throughput bars and latency percentiles of each
 * benchmark beside its baselines. vega + vega-lite render headless (no canvas); resvg-js makes the PNG
 * from prebuilt binaries (no install script).
 */
export async function drawChart(rows: ChartRow[], file: string, title: string): Promise<string[]> {
  const panel = (metric: 'throughput' | 'latency') => {
    // Each benchmark's bars have their own scale and unit (deliveries/s, MiB, %): the unit goes into
    // the benchmark's label, as one axis title cannot name them all.
    const data = rows
      .filter((r) => (metric === 'throughput' ? r.metric === 'throughput' : r.metric !== 'throughput'))
      .map((r) => (metric === 'throughput' ? { ...r, bench: [r.bench, r.unit] } : r));
    if (data.length === 0) return undefined;
    return {
      title:
        metric === 'throughput'
          ? 'Throughput and size (unit under each benchmark)'
          : 'Latency p50 / p99, ms (lower is better)',
      data: { values: data },
      facet: {
        row: {
          field: 'bench',
          type: 'nominal',
          title: null,
          header: { labelAngle: 0, labelAlign: 'left', labelFontWeight: 'bold' },
        },
      },
      spec: {
        width: 420,
        height: { step: metric === 'throughput' ? 18 : 10 },
        mark: { type: 'bar', tooltip: true },
        encoding: {
          y: { field: 'series', type: 'nominal', title: null, sort: null },
          ...(metric === 'latency' ? { yOffset: { field: 'metric', type: 'nominal' } } : {}),
          x: { field: 'value', type: 'quantitative', title: metric === 'throughput' ? null : 'ms' },
          color:
            metric === 'throughput'
              ? { field: 'series', type: 'nominal', legend: null }
              : { field: 'metric', type: 'nominal', title: 'percentile' },
        },
      },
      resolve: { scale: { x: 'independent', y: 'independent' } },
    };
  };
  const panels = [panel('throughput'), panel('latency')].filter(Boolean);
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title,
    background: 'white',
    hconcat: panels,
    config: { font: 'sans-serif' },
  };
  const compiled = vl.compile(spec as unknown as vl.TopLevelSpec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, svg);
  const out = [file];
  try {
    const { Resvg } = await import('@resvg/resvg-js');
    const png = new Resvg(svg, { font: { loadSystemFonts: true }, fitTo: { mode: 'zoom', value: 1.5 } })
      .render()
      .asPng();
    const pngFile = file.replace(/\.svg$/, '.png');
    fs.writeFileSync(pngFile, png);
    out.push(pngFile);
  } catch (err) {
    process.stderr.write(`PNG not rendered (${(err as Error).message}); the SVG is there\n`);
  }
  return out;
}
