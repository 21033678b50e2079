import { Counter, Histogram, Registry, collectDefaultMetrics, type Metric } from 'prom-client';
import { guardRefusals } from './outbound';
import { slotHeld, slotWaits } from './db/slots';

// Metrics are created unregistered and each process registers the ones it serves into its own registry.
export const deliveriesTotal = new Counter({
  name: 'a2a_push_deliveries_total',
  help: 'Delivery attempts by outcome',
  labelNames: ['outcome'] as const,
  registers: [],
});
export const attemptDuration = new Histogram({
  name: 'a2a_push_attempt_duration_seconds',
  help: 'Duration of one delivery attempt (request and answer)',
  buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30],
  registers: [],
});
export const eventWrites = new Counter({
  name: 'a2a_push_event_writes_total',
  help: 'Task events written to the outbox',
  registers: [],
});
export const configsFailing = new Counter({
  name: 'a2a_push_configs_stopped_failing_total',
  help: 'Push configs stopped as failing: no 2xx for CONFIG_FAILING_AFTER',
  registers: [],
});
export const configEvents = new Counter({
  name: 'a2a_push_config_events_total',
  help: 'Config events written to the feed (GET /v1/configEvents) by this process, by kind',
  labelNames: ['kind'] as const,
  registers: [],
});
export const workflowStarts = new Counter({
  name: 'a2a_push_starts_total',
  help: "Delivery workflows started by this process's relay, by path (direct: a job this process made due; claim: taken by a claim run), lane, and whether the start was eager (its first workflow task handed to the worker in this process)",
  labelNames: ['path', 'lane', 'eager'] as const,
  registers: [],
});
export const inboxRequests = new Counter({
  name: 'a2a_push_inbox_requests_total',
  help: 'Inbox callbacks by answer status and reason',
  labelNames: ['status', 'reason'] as const,
  registers: [],
});

export function createRegistry(kind: 'api' | 'inbox' | 'worker', extra: Metric[] = []) {
  const registry = new Registry();
  registry.setDefaultLabels({ process: kind });
  collectDefaultMetrics({ register: registry });
  const own: Metric[] =
    kind === 'worker'
      ? [
          deliveriesTotal,
          attemptDuration,
          guardRefusals,
          configsFailing,
          configEvents,
          slotWaits,
          slotHeld,
          workflowStarts,
        ]
      : kind === 'api'
        ? [eventWrites, guardRefusals, workflowStarts, configsFailing, configEvents]
        : [inboxRequests];
  for (const m of [...own, ...extra]) registry.registerMetric(m);
  return registry;
}
