/**
 * Tenant fairness on the dev server, measured (run by hand: `npx ts-node --transpile-only
 * bench/fairness-probe.ts [--n=2000] [--b=20] [--variants=off,on-p4,on-p1]`).
 *
 * For each variant a fresh in-memory dev server, one task queue and a deliberately small worker
 * (2 workflow tasks, 2 activities at a time). Tenant A starts N trivial workflows (one activity
 * each) as fast as it can, then tenant B starts 20. Each workflow carries its tenant as
 * `priority.fairnessKey`, as the service's do. Measured: B's start → first activity latency (p50,
 * max), and how many of A's activities ran before B's median one. Also checked: the priority the
 * activity saw (inherited from the workflow: its options set none), queued and eagerly dispatched.
 */
import crypto from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { Context } from '@temporalio/activity';
import { bundleWorkflowCode, DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { startDevServer } from '../src/embedded/temporal';
import { freePort, percentile, round, sleep, waitUntil } from './lib/util';

interface Seen {
  at: number;
  fairnessKey: string | undefined;
  order: number;
}
const seen = new Map<string, Seen>();
let ran = 0;

export const fairnessProbeActivities = {
  async probe(id: string): Promise<void> {
    seen.set(id, { at: Date.now(), fairnessKey: Context.current().info.priority?.fairnessKey, order: ran++ });
  },
};
export type FairnessProbeActivities = typeof fairnessProbeActivities;

const VARIANTS: Record<string, string[]> = {
  off: ['matching.enableFairness=false'],
  'off-p1': [
    'matching.enableFairness=false',
    'matching.numTaskqueueReadPartitions=1',
    'matching.numTaskqueueWritePartitions=1',
  ],
  'on-p4': ['matching.enableFairness=true'],
  'on-p1': [
    'matching.enableFairness=true',
    'matching.numTaskqueueReadPartitions=1',
    'matching.numTaskqueueWritePartitions=1',
  ],
};

const arg = (name: string, def: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? def;

async function runVariant(name: string, dynamicConfig: string[], n: number, nb: number, bundle: string) {
  const server = await startDevServer({ port: await freePort(), dynamicConfig, log: () => undefined });
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection });
  const native = await NativeConnection.connect({ address: server.address });
  const taskQueue = `fairness-probe-${crypto.randomBytes(3).toString('hex')}`;
  seen.clear();
  ran = 0;
  const worker = await Worker.create({
    connection: native,
    taskQueue,
    workflowBundle: { code: bundle },
    activities: fairnessProbeActivities,
    maxConcurrentWorkflowTaskExecutions: 2,
    maxConcurrentActivityTaskExecutions: 2,
  });
  const running = worker.run();
  const startedAt = new Map<string, number>();
  const start = async (tenant: string, id: string, eager = false) => {
    startedAt.set(id, Date.now());
    await client.workflow.start('fairnessProbe', {
      workflowId: id,
      taskQueue,
      args: [{ id, eager }],
      priority: { fairnessKey: tenant },
    });
  };
  try {
    // Inheritance, before the load: one queued and one eagerly dispatched activity of tenant I.
    await start('tenant-i', 'inherit-queued');
    await start('tenant-i', 'inherit-eager', true);
    await waitUntil(
      'inheritance probes',
      () => seen.has('inherit-queued') && seen.has('inherit-eager'),
      30_000,
    );
    // Tenant A's burst, 50 starts in flight, then tenant B's few.
    const t0 = Date.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 50 }, async () => {
        while (next < n) await start('tenant-a', `a-${next++}`);
      }),
    );
    const aStarted = Date.now() - t0;
    const aRanBeforeB = ran - 2;
    for (let i = 0; i < nb; i++) await start('tenant-b', `b-${i}`);
    await waitUntil('all activities', () => seen.size === n + nb + 2, 15 * 60_000);
    const lat = (prefix: string) =>
      [...seen.entries()].filter(([id]) => id.startsWith(prefix)).map(([id, s]) => s.at - startedAt.get(id)!);
    const b = lat('b-');
    const a = lat('a-');
    const bOrders = [...seen.entries()].filter(([id]) => id.startsWith('b-')).map(([, s]) => s.order);
    const bMedianOrder = percentile(bOrders, 50);
    const aBeforeBMedian = [...seen.entries()].filter(
      ([id, s]) => id.startsWith('a-') && s.order < bMedianOrder,
    ).length;
    return {
      variant: name,
      dynamicConfig: dynamicConfig.join(' '),
      aStartSeconds: round(aStarted / 1000),
      aRanBeforeBStarted: aRanBeforeB,
      bP50Ms: percentile(b, 50),
      bMaxMs: Math.max(...b),
      aP50Ms: percentile(a, 50),
      aBeforeBMedian,
      totalSeconds: round((Date.now() - t0) / 1000),
      inheritedQueued: seen.get('inherit-queued')?.fairnessKey ?? '(none)',
      inheritedEager: seen.get('inherit-eager')?.fairnessKey ?? '(none)',
    };
  } finally {
    worker.shutdown();
    await running;
    await native.close();
    await connection.close();
    await server.stop();
  }
}

async function main() {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const n = Number(arg('n', '2000'));
  const nb = Number(arg('b', '20'));
  const names = arg('variants', 'off,on-p4,on-p1').split(',');
  const { code } = await bundleWorkflowCode({
    workflowsPath: require.resolve('./lib/fairness-probe-workflow'),
    logger: new DefaultLogger('ERROR'),
  });
  for (const name of names) {
    const dc = VARIANTS[name];
    if (!dc) throw new Error(`unknown variant ${name} (${Object.keys(VARIANTS).join(', ')})`);
    console.log(JSON.stringify(await runVariant(name, dc, n, nb, code)));
    await sleep(1000);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
