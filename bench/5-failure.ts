import { runDeliveryThroughput } from './1-delivery';
import { eventPlan } from './lib/api';
import type { Benchmark } from './lib/context';
import { figure } from './lib/report';
import { runDirectSender } from './lib/senders';
import { SHORT_RETRIES, startSender } from './lib/stack';
import { round, seeded } from './lib/util';

/** The same failure script for every sender: event i fails its first failures[i] requests (0 for 70 %). */
export function failurePlan(n: number, seed = 8): number[] {
  const rnd = seeded(seed);
  return Array.from({ length: n }, () => (rnd() < 0.3 ? 1 + Math.floor(rnd() * 3) : 0));
}

const indexOf = (id: string) => Number(id.slice(id.lastIndexOf('-') + 1));

export const failureBenchmark: Benchmark = {
  name: 'failure',
  title: '5. Delivered under failure: 503 to the first 1-3 requests of a seeded 30 % of the events',
  async run(ctx) {
    const n = ctx.quick ? 100 : 500;
    const failures = failurePlan(n);
    const failing = failures.filter((f) => f > 0).length;
    const receiver = ctx.receiver;
    receiver.reset();
    receiver.setScript((id, k) => (k <= (failures[indexOf(id)] ?? 0) ? 503 : 200));
    const { temporal, services } = await startSender(ctx, receiver, SHORT_RETRIES);
    // What arrived by the deadline is the result; a shortfall is a missed target, not a failed run.
    const deadlineMs = Math.max(120_000, n * 200);
    let ours;
    try {
      ours = await runDeliveryThroughput({
        temporalAddress: temporal.address,
        n,
        services,
        receiver,
        partial: true,
        timeoutMs: deadlineMs,
      });
    } finally {
      await services.stop();
    }
    // @a2a-js/sdk: one POST per event, no retry.
    const runId = `f${Date.now().toString(36)}`;
    const plan = eventPlan(
      n,
      Array.from({ length: 100 }, (_, i) => `${runId}-task-${i}`),
      runId,
    );
    const sdk = await runDirectSender({
      mode: 'sdk',
      url: `${receiver.url}/hook/sdk`,
      caFile: receiver.tls.caFile,
      concurrency: 32,
      items: plan,
    });
    const sdkDelivered = plan.filter((e) => receiver.delivered.has(e.id));
    const t0 = Math.min(...Object.values(sdk.sentAt));
    const sdkLast = Math.max(t0, ...sdkDelivered.map((e) => receiver.delivered.get(e.id)!));
    receiver.reset();
    const oursFraction = round((ours.delivered / n) * 100);
    const sdkFraction = round((sdkDelivered.length / n) * 100);
    const bench = '5 failure';
    return {
      name: this.name,
      title: this.title,
      figures: [
        figure(
          'ours delivered',
          oursFraction,
          '%',
          { label: '@a2a-js/sdk delivered', value: sdkFraction },
          { text: 'ours 100 %', met: ours.delivered === n },
        ),
        figure('ours event writes answered 503 (retried after Retry-After)', ours.writeRefusals, 'answers'),
        figure('ours event writes still refused after 5 attempts', ours.writeFailures, 'events'),
        figure('ours time to last delivery', round(ours.elapsedMs / 1000, 2), 's', {
          label: '@a2a-js/sdk (its last 2xx)',
          value: round((sdkLast - t0) / 1000, 2),
        }),
        figure('ours event → delivered p99', ours.latencyMs.p99, 'ms', {
          label: 'ours p50',
          value: ours.latencyMs.p50,
        }),
      ],
      chart: [
        { bench, series: 'ours delivered %', metric: 'throughput', value: oursFraction, unit: '%' },
        { bench, series: '@a2a-js/sdk delivered %', metric: 'throughput', value: sdkFraction, unit: '%' },
      ],
      notes: [
        `${n} events over 100 tasks; ${failing} of them (seeded) answered 503 to their first 1-3 requests, the same script for both senders.`,
        `ours delivered ${ours.delivered} of ${n} within ${deadlineMs / 1000} s of the first event write (counted by the receiver: events it answered 2xx); time to last delivery and latencies cover the delivered ones.`,
        `Short retry settings for this run: RETRY_INITIAL=${SHORT_RETRIES.RETRY_INITIAL}, RETRY_FACTOR=${SHORT_RETRIES.RETRY_FACTOR}, RETRY_MAX=${SHORT_RETRIES.RETRY_MAX} (defaults 30s, 3, 6h), jitter ×U(0.8, 1.2).`,
        '@a2a-js/sdk sends once and never retries: what it delivered is what the receiver accepted the first time.',
      ],
      details: {
        ours,
        sdk: { delivered: sdkDelivered.length, n, failures: sdk.failures, lastMs: sdkLast - t0 },
        failing,
      },
    };
  },
};
