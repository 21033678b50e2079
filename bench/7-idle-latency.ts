import { stageBreakdown, startBareWorker } from './1-delivery';
import { ApiClient } from './lib/api';
import type { Benchmark } from './lib/context';
import { figure } from './lib/report';
import { startSender } from './lib/stack';
import { latency, sleep, waitUntil } from './lib/util';

export const idleLatencyBenchmark: Benchmark = {
  name: 'idle-latency',
  title: '7. Latency when idle: one event at a time',
  async run(ctx) {
    const m = ctx.quick ? 20 : 100;
    const receiver = ctx.receiver;
    const { temporal, databaseUrl, services } = await startSender(ctx, receiver);
    const ours: number[] = [];
    const answered: number[] = [];
    const bareLat: number[] = [];
    const runId = `i${Date.now().toString(36)}`;
    let stages: Record<string, number> = {};
    try {
      const api = new ApiClient(services.api.url, services.apiKey, 4);
      await api.createConfigs([`${runId}-task`], 1, receiver.url);
      // A few unmeasured events first: connections, JIT and the worker's caches warm up.
      for (let i = -5; i < m; i++) {
        const id = `${runId}-${i}`;
        const t0 = Date.now();
        await api.postEvent(`${runId}-task`, id);
        if (i >= 0) answered.push(Date.now() - t0);
        await waitUntil(`delivery ${id}`, () => receiver.delivered.has(id), 30_000);
        if (i >= 0) ours.push(receiver.delivered.get(id)! - t0);
        await sleep(100);
      }
      await api.close();
      stages = {
        'event write answered': latency(answered).p50,
        ...(await stageBreakdown(databaseUrl, runId)),
      };
    } finally {
      await services.stop();
    }
    const bare = await startBareWorker(temporal.address, receiver);
    try {
      for (let i = -5; i < m; i++) {
        const id = `${runId}-bare-${i}`;
        const t0 = Date.now();
        await bare.client.workflow.start('bareDelivery', {
          workflowId: `bare-${id}`,
          taskQueue: bare.taskQueue,
          args: [{ taskId: `${runId}-task`, id }],
        });
        await waitUntil(`bare ${id}`, () => receiver.delivered.has(id), 30_000);
        if (i >= 0) bareLat.push(receiver.delivered.get(id)! - t0);
        await sleep(100);
      }
    } finally {
      await bare.stop();
    }
    const o = latency(ours);
    const b = latency(bareLat);
    return {
      name: this.name,
      title: this.title,
      figures: [
        figure(
          'ours event → POST p50',
          o.p50,
          'ms',
          { label: 'bare start → POST p50', value: b.p50 },
          {
            text: 'p50 ≤ 1.5 × bare',
            met: o.p50 <= 1.5 * b.p50,
          },
        ),
        figure('ours event → POST p99', o.p99, 'ms', { label: 'bare start → POST p99', value: b.p99 }),
      ],
      chart: [
        { bench: '7 idle latency', series: 'ours event → POST', metric: 'p50', value: o.p50, unit: 'ms' },
        { bench: '7 idle latency', series: 'ours event → POST', metric: 'p99', value: o.p99, unit: 'ms' },
        { bench: '7 idle latency', series: 'bare start → POST', metric: 'p50', value: b.p50, unit: 'ms' },
        { bench: '7 idle latency', series: 'bare start → POST', metric: 'p99', value: b.p99, unit: 'ms' },
      ],
      notes: [
        `${m} events one at a time (100 ms apart, after 5 unmeasured), same dev server (WAL) for both.`,
        `ours, p50 per stage (ms): ${JSON.stringify(stages)}`,
      ],
      details: { ours: o, bare: b, stages },
    };
  },
};
