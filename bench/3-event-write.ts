import path from 'node:path';
import { ApiClient } from './lib/api';
import type { Benchmark } from './lib/context';
import { load, type LoadResult } from './lib/load';
import { figure, type ChartRow, type Figure } from './lib/report';
import {
  freshDatabase,
  spawnBenchProcess,
  startBenchTemporal,
  startServices,
  type Services,
} from './lib/stack';
import { benchStreamResponse, freePort } from './lib/util';

const TENANT = 'default';

export const eventWriteBenchmark: Benchmark = {
  name: 'event-write',
  title: '3. Event write: POST /v1/tasks/{taskId}/events at 32 concurrent clients over 1,000 tasks',
  async run(ctx) {
    const durationS = ctx.quick ? 5 : 15;
    const taskCount = 1000;
    const figures: Figure[] = [];
    const chart: ChartRow[] = [];
    const details: Record<string, unknown> = {};
    const databaseUrl = await freshDatabase(ctx.pg);
    // Temporal away: the write must not wait on it (starts come after the answer; the sweeper catches up).
    const down = `127.0.0.1:${await freePort()}`;
    let services: Services | undefined = await startServices({
      dir: ctx.dir,
      databaseUrl,
      temporalAddress: down,
      caFile: ctx.receiver.tls.caFile,
      start: { inbox: false, workers: false },
      env: { SWEEP_INTERVAL: '10m' },
    });
    const baseline = await spawnBenchProcess(path.join(__dirname, 'lib', 'baseline-server.ts'), [
      databaseUrl,
      TENANT,
    ]);
    const baseUrl = `http://127.0.0.1:${baseline.ready}`;
    try {
      for (const perTask of [1, 4]) {
        const runId = `w${perTask}-${Date.now().toString(36)}`;
        const tasks = Array.from({ length: taskCount }, (_, i) => `${runId}-task-${i}`);
        const api = new ApiClient(services.api.url, services.apiKey, 16);
        ctx.log(`creating ${taskCount * perTask} configs`);
        await api.createConfigs(tasks, perTask, ctx.receiver.url);
        await api.close();
        let seq = 0;
        const next = (auth: boolean) => () => {
          const t = tasks[seq++ % taskCount]!;
          return {
            path: `/v1/tasks/${t}/events`,
            headers: {
              'content-type': 'application/json',
              ...(auth ? { authorization: `Bearer ${services!.apiKey}` } : {}),
            },
            body: JSON.stringify({ streamResponse: benchStreamResponse(t, `${runId}-${seq}`) }),
          };
        };
        // Baseline first, then ours, on the same tables.
        ctx.log(`${perTask} config(s)/task: baseline`);
        const b = await load({ url: baseUrl, connections: 32, durationS, next: next(false) });
        ctx.log(`${perTask} config(s)/task: ours (Temporal unreachable)`);
        const o = await load({ url: services.api.url, connections: 32, durationS, next: next(true) });
        details[`${perTask}cfg`] = { ours: o, baseline: b };
        pushFigures(figures, chart, `${perTask} config(s)/task`, o, b);
      }
      // The same write with Temporal up on this machine: the dispatcher starts workflows meanwhile.
      await services.stop();
      services = undefined;
      const temporal = await startBenchTemporal(ctx.dir, 'memory');
      try {
        services = await startServices({
          dir: ctx.dir,
          databaseUrl: await freshDatabase(ctx.pg),
          temporalAddress: temporal.address,
          caFile: ctx.receiver.tls.caFile,
          start: { inbox: false, workers: false },
        });
        const runId = `wu-${Date.now().toString(36)}`;
        const tasks = Array.from({ length: taskCount }, (_, i) => `${runId}-task-${i}`);
        const api = new ApiClient(services.api.url, services.apiKey, 16);
        await api.createConfigs(tasks, 1, ctx.receiver.url);
        await api.close();
        let seq = 0;
        ctx.log(
          '1 config/task: ours with the dev server up (no worker), starting workflows after each answer',
        );
        const up = await load({
          url: services.api.url,
          connections: 32,
          durationS,
          next: () => {
            const t = tasks[seq++ % taskCount]!;
            return {
              path: `/v1/tasks/${t}/events`,
              headers: { 'content-type': 'application/json', authorization: `Bearer ${services!.apiKey}` },
              body: JSON.stringify({ streamResponse: benchStreamResponse(t, `${runId}-${seq}`) }),
            };
          },
        });
        const b1 = (details['1cfg'] as { baseline: LoadResult }).baseline;
        details.temporalUp = up;
        figures.push(
          figure('1 cfg, Temporal up: ours req/s', up.rps, 'req/s', {
            label: 'baseline (1 cfg)',
            value: b1.rps,
          }),
        );
        figures.push(
          figure('1 cfg, Temporal up: ours p99', up.p99, 'ms', { label: 'baseline p99', value: b1.p99 }),
        );
        chart.push({
          bench: '3 event write',
          series: 'ours 1 cfg, Temporal up',
          metric: 'throughput',
          value: up.rps,
          unit: 'req/s',
        });
      } finally {
        await services?.stop();
        services = undefined;
        await temporal.stop();
      }
    } finally {
      await services?.stop();
      await baseline.stop();
    }
    return {
      name: this.name,
      title: this.title,
      figures,
      chart,
      notes: [
        `autocannon, 32 connections, ${durationS} s per run, events round-robin over 1,000 tasks; baseline: bare Express + pg, the same event + job inserts in one transaction (no auth, validation, idempotency, bound or log).`,
        'Main runs: the api with Temporal unreachable (the answer never waits on it); last run: with the dev server up on this machine and the dispatcher starting workflows (no worker), sharing the 2 cores.',
      ],
      details,
    };
  },
};

function pushFigures(figures: Figure[], chart: ChartRow[], what: string, o: LoadResult, b: LoadResult) {
  figures.push(
    figure(
      `${what}: ours req/s`,
      o.rps,
      'req/s',
      { label: 'baseline', value: b.rps },
      { text: '≥ 0.5 × baseline', met: o.rps >= 0.5 * b.rps },
    ),
    figure(`${what}: ours p50`, o.p50, 'ms', { label: 'baseline p50', value: b.p50 }),
    figure(
      `${what}: ours p99`,
      o.p99,
      'ms',
      { label: 'baseline p99', value: b.p99 },
      { text: '≤ 2 × baseline p99', met: o.p99 <= 2 * b.p99 },
    ),
  );
  if (o.non2xx + o.errors + b.non2xx + b.errors > 0)
    figures.push(
      figure(`${what}: non-2xx/errors ours`, o.non2xx + o.errors, 'answers', {
        label: 'baseline',
        value: b.non2xx + b.errors,
      }),
    );
  const bench = '3 event write';
  chart.push(
    { bench, series: `ours ${what}`, metric: 'throughput', value: o.rps, unit: 'req/s' },
    { bench, series: `baseline ${what}`, metric: 'throughput', value: b.rps, unit: 'req/s' },
    { bench, series: `ours ${what}`, metric: 'p50', value: o.p50, unit: 'ms' },
    { bench, series: `ours ${what}`, metric: 'p99', value: o.p99, unit: 'ms' },
    { bench, series: `baseline ${what}`, metric: 'p50', value: b.p50, unit: 'ms' },
    { bench, series: `baseline ${what}`, metric: 'p99', value: b.p99, unit: 'ms' },
  );
}
