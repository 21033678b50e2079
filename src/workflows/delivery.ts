import {
  condition,
  log,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { DeliveryActivities, AttemptOutput } from '../activities/delivery';
import { DeliveryStatus } from './search-attributes';
import { deliveryStatusQuery, wakeSignal, type DeliveryState } from './signals';

const attemptOptions = {
  // The activity bounds its own request (DELIVERY_TIMEOUT ≤ 60 s); this covers the database around it.
  startToCloseTimeout: '2 minutes',
  // The worker heartbeats while the attempt runs: a worker killed mid-POST is noticed in 20 s, and the
  // retried activity records the attempt interrupted.
  heartbeatTimeout: '20 seconds',
  // Only the service's own failures throw (Postgres down, unseal error): retried until they pass; the
  // activity ends the job `expired` once it can see the deadline passed.
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '5 minutes' },
} as const;

const { attemptDelivery } = proxyActivities<DeliveryActivities>(attemptOptions);

export interface DeliveryInput {
  jobId: string;
}

export interface DeliveryResult {
  status: string;
  attempts: number;
  reason?: string;
}

/** One workflow per delivery job: one activity per attempt, a timer (cut short by `wake`) between them. */
export async function deliveryWorkflow({ jobId }: DeliveryInput): Promise<DeliveryResult> {
  let woken = false;
  const state: DeliveryState = { status: 'queued', attempts: 0 };
  setHandler(wakeSignal, () => {
    woken = true;
  });
  setHandler(deliveryStatusQuery, () => state);

  let attempt = 1;
  let maxAttempts: number | undefined;
  let lastStatus = 'queued';
  let lane: 'slow' | undefined;
  // The slow lane: attempts to a target that recently timed out, refused or was slow run on their own
  // task queue, whose worker slots are bounded apart (SLOW_LANE_CONCURRENCY), so many dead targets
  // together can never take the slots healthy targets need.
  const slowLane = proxyActivities<DeliveryActivities>({
    ...attemptOptions,
    taskQueue: `${workflowInfo().taskQueue}-slow`,
  });
  for (;;) {
    // A wake that arrives while the attempt runs is kept: the next wait then ends at once.
    woken = false;
    const plan = maxAttempts ? `attempt ${attempt} of ${maxAttempts}` : `attempt ${attempt}`;
    const r: AttemptOutput =
      lane === 'slow'
        ? await slowLane.attemptDelivery.executeWithOptions({ summary: `${plan} (slow lane)` }, [
            { jobId, attempt, now: Date.now(), jitter: Math.random(), lane },
          ])
        : await attemptDelivery.executeWithOptions({ summary: plan }, [
            { jobId, attempt, now: Date.now(), jitter: Math.random(), lane: 'fast' },
          ]);
    lane = r.lane;
    if (lane) state.lane = lane;
    else delete state.lane;
    if (r.waitingForSlot !== undefined) state.waitingForSlot = r.waitingForSlot;
    else delete state.waitingForSlot;
    if (r.waitingFor !== undefined) state.waitingFor = r.waitingFor;
    else delete state.waitingFor;
    maxAttempts = r.maxAttempts;
    state.status = r.status;
    state.attempts = r.attempts;
    if (r.reason !== undefined) state.reason = r.reason;
    state.nextAttemptInMs = r.waitMs;
    if (r.status !== lastStatus) {
      upsertSearchAttributes([{ key: DeliveryStatus, value: r.status }]);
      lastStatus = r.status;
    }
    if (r.waitMs === undefined) {
      setCurrentDetails(`${r.status}${r.reason ? ` (${r.reason})` : ''} after ${r.attempts} attempt(s)`);
      log.info('delivery finished', { jobId, status: r.status, attempts: r.attempts, reason: r.reason });
      return {
        status: r.status,
        attempts: r.attempts,
        ...(r.reason !== undefined ? { reason: r.reason } : {}),
      };
    }
    if (r.waitingFor !== undefined) {
      // DELIVERY_ORDER=per_config: an earlier delivery of the config has not ended; its end wakes this one.
      const inLine = `waiting for delivery ${r.waitingFor} (earlier event of this config)`;
      setCurrentDetails(inLine);
      await condition(() => woken, r.waitMs, { summary: inLine });
      attempt = r.attempts + 1;
      continue;
    }
    if (r.waitingForSlot !== undefined) {
      // Its target is at OUTBOUND_HOST_CONCURRENCY: in line, no attempt used; a freed slot wakes it.
      const inLine = `waiting for a slot at host ${r.waitingForSlot}`;
      setCurrentDetails(`${inLine} for attempt ${r.attempts + 1} of ${maxAttempts ?? '?'}`);
      await condition(() => woken, r.waitMs, { summary: inLine });
      attempt = r.attempts + 1;
      continue;
    }
    // What an operator reads in the Web UI: "attempt 3 of 8 (http_503), waiting 270 s".
    const waiting = `attempt ${r.attempts} of ${maxAttempts ?? '?'}${r.reason ? ` (${r.reason})` : ''}, waiting ${Math.round(r.waitMs / 1000)} s`;
    setCurrentDetails(`${waiting} for attempt ${r.attempts + 1}${lane === 'slow' ? ' (slow lane)' : ''}`);
    if (r.waitMs > 0) await condition(() => woken, r.waitMs, { summary: waiting });
    attempt = r.attempts + 1;
  }
}
