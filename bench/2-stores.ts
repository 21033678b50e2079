import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { runDeliveryThroughput } from './1-delivery';
import type { Benchmark } from './lib/context';
import { figure, type ChartRow } from './lib/report';
import { freshDatabase, STORE_LABEL, startBenchTemporal, type StoreMode } from './lib/stack';
import { pool, round } from './lib/util';

/**
 * Does a store keep what the server acknowledged when its process is killed? `n` workflow starts
 * (each acknowledged), SIGKILL at once, a restart on the same file (the in-memory server: a restart on
 * the same port, with nothing to read), then every id described. Every store is measured the same way.
 */
async function crashCheck(dir: string, mode: StoreMode, n: number) {
  const first = await startBenchTemporal(dir, mode);
  const port = Number(first.address.split(':')[1]);
  const ids = Array.from({ length: n }, (_, i) => `crash-${mode}-${Date.now().toString(36)}-${i}`);
  {
    const connection = await Connection.connect({ address: first.address });
    const client = new Client({ connection });
    // No worker polls this queue: the workflows stay running, only the start has to be kept.
    await pool(ids, 16, async (id) => {
      await client.workflow.start('bareDelivery', { workflowId: id, taskQueue: 'crash-check', args: [{}] });
    });
    await connection.close();
  }
  first.process.kill('SIGKILL');
  await new Promise<void>((r) =>
    first.process.exitCode !== null ? r() : first.process.once('exit', () => r()),
  );
  const again = await startBenchTemporal(dir, mode, first.dbFile, port);
  try {
    const connection = await Connection.connect({ address: again.address });
    const client = new Client({ connection });
    let found = 0;
    await pool(ids, 16, async (id) => {
      try {
        await client.workflow.getHandle(id).describe();
        found++;
      } catch (err) {
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
    });
    await connection.close();
    return { acknowledged: n, found };
  } finally {
    await again.stop();
  }
}

const MODES: StoreMode[] = ['sqlite-defaults', 'wal', 'memory'];

export const storesBenchmark: Benchmark = {
  name: 'stores',
  title:
    '2. Embedded store settings: the dev server with SQLite defaults, WAL + synchronous=normal, in memory',
  async run(ctx) {
    const n = ctx.quick ? 200 : 1000;
    const crashN = ctx.quick ? 100 : 500;
    const runs: Record<string, Awaited<ReturnType<typeof runDeliveryThroughput>>> = {};
    const crash: Record<string, { acknowledged: number; found: number }> = {};
    for (const mode of MODES) {
      ctx.log(`${STORE_LABEL[mode]}: ${n} events, then a SIGKILL after ${crashN} acknowledged starts`);
      const temporal = await startBenchTemporal(ctx.dir, mode);
      try {
        runs[mode] = await runDeliveryThroughput({
          temporalAddress: temporal.address,
          n,
          databaseUrl: await freshDatabase(ctx.pg),
          receiver: ctx.receiver,
          serverPid: temporal.pid,
        });
      } finally {
        await temporal.stop();
      }
      crash[mode] = await crashCheck(ctx.dir, mode, crashN);
    }
    const base = runs['sqlite-defaults']!;
    const bench = '2 stores';
    const chart: ChartRow[] = MODES.flatMap((m) => [
      {
        bench,
        series: STORE_LABEL[m],
        metric: 'throughput' as const,
        value: runs[m]!.deliveriesPerSec,
        unit: 'deliveries/s',
      },
      { bench, series: STORE_LABEL[m], metric: 'p50' as const, value: runs[m]!.latencyMs.p50, unit: 'ms' },
      { bench, series: STORE_LABEL[m], metric: 'p99' as const, value: runs[m]!.latencyMs.p99, unit: 'ms' },
    ]);
    const survives = (m: StoreMode) => crash[m]!.found === crash[m]!.acknowledged;
    // The embedded start's setting (src/embedded/temporal.ts): the fastest that survives the crash.
    const fastestSurviving = MODES.filter(survives).sort(
      (a, b) => runs[b]!.deliveriesPerSec - runs[a]!.deliveriesPerSec,
    )[0];
    return {
      name: this.name,
      title: this.title,
      figures: [
        ...MODES.map((m) =>
          figure(
            `${STORE_LABEL[m]} deliveries/s`,
            runs[m]!.deliveriesPerSec,
            '/s',
            m === 'sqlite-defaults' ? undefined : { label: 'SQLite defaults', value: base.deliveriesPerSec },
          ),
        ),
        ...(['p50', 'p99'] as const).flatMap((p) =>
          MODES.map((m) =>
            figure(
              `${STORE_LABEL[m]} event → POST ${p}`,
              runs[m]!.latencyMs[p],
              'ms',
              m === 'sqlite-defaults' ? undefined : { label: 'SQLite defaults', value: base.latencyMs[p] },
            ),
          ),
        ),
        ...MODES.map((m) =>
          figure(`${STORE_LABEL[m]}: acknowledged starts found after SIGKILL`, crash[m]!.found, 'workflows', {
            label: 'acknowledged',
            value: crash[m]!.acknowledged,
          }),
        ),
        // The verdict follows from the measured figures above: the store with the most deliveries/s
        // among those whose every acknowledged start was found again after the kill.
        figure(
          `fastest store that kept every acknowledged start: ${fastestSurviving ? STORE_LABEL[fastestSurviving] : 'none'}`,
          fastestSurviving ? runs[fastestSurviving]!.deliveriesPerSec : 0,
          '/s',
          undefined,
          {
            text: "the fastest surviving store is the embedded start's (WAL + synchronous=normal)",
            met: fastestSurviving === 'wal',
          },
        ),
      ],
      chart,
      notes: [
        `${n} events over 100 tasks through the whole service (1 worker process) on a fresh dev server per store.`,
        `Crash check: ${crashN} workflow starts acknowledged by the server, SIGKILL of its process, a restart on the same file (in memory: on the same port), every id described. A process kill keeps what SQLite wrote to the OS; synchronous=normal can lose the last commits only on an OS crash or power loss.`,
        `fastest surviving store: ${fastestSurviving ? STORE_LABEL[fastestSurviving] : 'none'}; dev server CPU (cores): ${MODES.map((m) => `${STORE_LABEL[m]} ${runs[m]!.cpu.server}`).join(', ')}.`,
        `ratio WAL/defaults ${round(runs.wal!.deliveriesPerSec / base.deliveriesPerSec, 2)}, memory/defaults ${round(runs.memory!.deliveriesPerSec / base.deliveriesPerSec, 2)}.`,
      ],
      details: { runs, crash },
    };
  },
};
