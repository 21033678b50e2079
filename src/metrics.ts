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
export const workflowStarts = new Counter({
  name: 'a2a_push_dispatch_starts_total',
  help: 'Delivery workflows started by the dispatcher, by path (direct, claim) and whether the start was eager (its first workflow task handed to the worker in this process)',
  labelNames: ['path', 'eager'] as const,
  registers: [],
});
export const lineWakes = new Counter({
  name: 'a2a_push_line_wakes_total',
  help: 'Jobs of an ordered line (DELIVERY_ORDER=per_config) woken by the worker when the job ahead or their config ended, by how: eager (not started yet, started eagerly on this worker), started (not started yet, its start went through the task queue), tenant_full (not started yet, its tenant had EAGER_START_PER_TENANT eager starts in flight: a signal-with-start), signal (a signal-with-start of a job that had its workflow)',
  labelNames: ['how'] as const,
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
      ? [deliveriesTotal, attemptDuration, guardRefusals, configsFailing, slotWaits, slotHeld, lineWakes]
      : kind === 'api'
        ? [eventWrites, guardRefusals, workflowStarts]
        : [inboxRequests];
  for (const m of [...own, ...extra]) registry.registerMetric(m);
  return registry;
}
