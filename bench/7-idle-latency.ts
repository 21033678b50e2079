import { stageBreakdown, startBareWorker, type BareShape } from './1-delivery';
import { ApiClient } from './lib/api';
import type { Benchmark } from './lib/context';
import { figure, latencyRows } from './lib/report';
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
    // The bare workflow (the target's baseline), then the floor: the same delivery as one workflow whose
    // POST is a local activity, started eagerly from its worker's process (benchmark 1's (d)).
    let floorEager = 0;
    const bareIdle = async (shape: BareShape): Promise<number[]> => {
      const lat: number[] = [];
      const bare = await startBareWorker(temporal.address, receiver, 'default', shape);
      try {
        for (let i = -5; i < m; i++) {
          const id = `${runId}-bare-${shape}-${i}`;
          const { sentAt, eager } = await bare.startAll([{ id, taskId: `${runId}-task` }], 1);
          if (i >= 0) floorEager += eager ?? 0;
          await waitUntil(`bare ${id}`, () => receiver.delivered.has(id), 30_000);
          if (i >= 0) lat.push(receiver.delivered.get(id)! - sentAt.get(id)!);
          await sleep(100);
        }
      } finally {
        await bare.stop();
      }
      return lat;
    };
    bareLat.push(...(await bareIdle('classic')));
    const floorLat = await bareIdle('lean');
    const o = latency(ours);
    const b = latency(bareLat);
    const f = latency(floorLat);
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
        figure(
          'ours event → POST p50',
          o.p50,
          'ms',
          { label: 'bare start → POST p50', value: b.p50 },
          { text: 'p50 ≤ 0.7 × bare (issue 21)', met: o.p50 <= 0.7 * b.p50 },
        ),
        figure('ours event → POST p99', o.p99, 'ms', { label: 'bare start → POST p99', value: b.p99 }),
        figure('floor: bare lean start → POST p50', f.p50, 'ms', {
          label: 'bare start → POST p50',
          value: b.p50,
        }),
        figure('ours event → POST p50', o.p50, 'ms', {
          label: 'floor: bare lean start → POST p50',
          value: f.p50,
        }),
      ],
      chart: [
        ...latencyRows('7 idle latency', 'ours event → POST', o),
        ...latencyRows('7 idle latency', 'bare start → POST', b),
        ...latencyRows('7 idle latency', 'floor: bare lean start → POST', f),
      ],
      notes: [
        `${m} events one at a time (100 ms apart, after 5 unmeasured), same dev server (WAL) for both.`,
        `ours, p50 per stage (ms): ${JSON.stringify(stages)}`,
        "floor: one workflow whose POST is a local activity, started eagerly by a client in its worker's process (benchmark 1's (d)): no api, database or checks. Ours does all of its work and more (one workflow per delivery), so ours ÷ bare below floor ÷ bare is out of reach.",
        `floor: ${floorEager} of ${m} measured starts eager.`,
      ],
      details: { ours: o, bare: b, floor: f, stages },
    };
  },
};
