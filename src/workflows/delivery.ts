import {
  condition,
  log,
  proxyActivities,
  proxyLocalActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { DeliveryActivities } from '../activities/delivery';
import type { AttemptInput, AttemptOutput } from '../activities/delivery-types';
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
  /**
   * DELIVERY_ORDER=per_config: the unfinished earlier job of its config this one was written behind.
   * The run waits for a wake (that job's end) before its first attempt call, rather than calling the
   * activity only to learn it is held; the activity still decides once woken. Absent in runs started
   * before it (their histories replay unchanged). Dispatchers since session 16 no longer set it: such
   * a job's start is delayed instead (src/temporal.ts, BEHIND_START_DELAY_MS), so it has no workflow
   * task at all until its wake; runs started with it (by an older dispatcher) still wait as before.
   */
  behind?: string;
  /** With `behind`: the job's deadline (epoch ms): the wait for the wake ends by then (to expire it). */
  until?: number;
  /**
   * `slow`: the dispatcher saw its target unknown (no 2xx lately) or suspect, so the first attempt
   * goes to the slow lane at once: one activity and one workflow task fewer than asking the fast lane,
   * which would answer `slow` untried. Absent in runs started before it.
   */
  lane?: 'slow';
}

/**
 * How long a run started `behind` another job waits for its wake before it asks the activity itself
 * (a wake lost to a crash), as a held job's recheck while the job ahead is not on the wire
 * (src/activities/delivery.ts, ORDER_RECHECK_MS); never past the job's deadline. Not shorter: a burst
 * of thousands of held jobs would all wake at once to learn they are still held (benchmark 9 (d) with
 * 30 s: B's p50 20 × idle instead of 11 ×).
 */
const BEHIND_RECHECK_MS = 5 * 60_000;

export interface DeliveryResult {
  status: string;
  attempts: number;
  reason?: string;
}

/** One call of the attempt activity, in one lane, with the summary the Web UI shows for it. */
type AttemptCall = (summary: string, input: AttemptInput) => Promise<AttemptOutput>;

/**
 * The slow lane (both types): attempts to a target that recently timed out, refused or was slow run on
 * their own task queue, whose worker slots are bounded apart (SLOW_LANE_CONCURRENCY), so many dead
 * targets together can never take the slots healthy targets need.
 */
function slowLane(): AttemptCall {
  const { attemptDelivery: inSlowLane } = proxyActivities<DeliveryActivities>({
    ...attemptOptions,
    taskQueue: `${workflowInfo().taskQueue}-slow`,
  });
  return (summary, input) => inSlowLane.executeWithOptions({ summary }, [input]);
}

/** One workflow per delivery job: one activity per attempt, a timer (cut short by `wake`) between them. */
export async function deliveryWorkflow(job: DeliveryInput): Promise<DeliveryResult> {
  return deliveryLoop(job, {
    fast: (summary, input) => attemptDelivery.executeWithOptions({ summary }, [input]),
    slow: slowLane(),
  });
}

/**
 * The fast lane of the lean type (issue 21): the attempt as a local activity, run by the worker that
 * runs the workflow task, recorded as one marker event in the task's completion (no activity task,
 * no second workflow task). No activity heartbeat: a killed worker is noticed by the workflow task
 * timeout (20 s, set at start: src/temporal.ts), after which the attempt runs again and finds its row
 * started: `interrupted`, as after today's heartbeat timeout. A retry backoff of 10 s or more (the
 * service's own failures: Postgres away) waits on a server timer rather than in the worker, which
 * would hold the workflow task slot meanwhile.
 */
const { attemptDelivery: attemptLocally } = proxyLocalActivities<DeliveryActivities>({
  startToCloseTimeout: attemptOptions.startToCloseTimeout,
  retry: attemptOptions.retry,
  localRetryThreshold: '10 seconds',
});

/**
 * The lean delivery workflow (DELIVERY_WORKFLOW=lean): the same loop, the fast-lane attempt as a local
 * activity (a first-try delivery is 7 history events instead of 12). The slow lane stays a normal,
 * heartbeated activity on its own task queue: a slow target never holds a workflow task slot.
 */
export async function deliveryWorkflowLean(job: DeliveryInput): Promise<DeliveryResult> {
  return deliveryLoop(job, {
    fast: (summary, input) => attemptLocally.executeWithOptions({ summary }, [input]),
    slow: slowLane(),
  });
}

/**
 * The loop both types share: one attempt per turn (its lane from the last answer), then the wait the
 * answer asks for. Changing what it does, or in which order, changes the commands of deliveryWorkflow's
 * saved histories (test/replay): add a new workflow type instead.
 */
async function deliveryLoop(
  { jobId, behind, until, lane: firstLane }: DeliveryInput,
  lanes: { fast: AttemptCall; slow: AttemptCall },
): Promise<DeliveryResult> {
  let woken = false;
  const state: DeliveryState = { status: 'queued', attempts: 0 };
  setHandler(wakeSignal, () => {
    woken = true;
  });
  setHandler(deliveryStatusQuery, () => state);

  let attempt = 1;
  let maxAttempts: number | undefined;
  let lastStatus = 'queued';
  let lane: 'slow' | undefined = firstLane === 'slow' ? 'slow' : undefined;
  if (lane) state.lane = lane;
  if (behind) {
    // Written behind an unfinished job of its config: that one's end wakes this run (no activity until
    // then); by its deadline at the latest, the activity ends it `expired`.
    const inLine = `waiting for delivery ${behind} (earlier event of this config)`;
    const waitMs = Math.max(
      0,
      Math.min(BEHIND_RECHECK_MS, until !== undefined ? until - Date.now() + 1_000 : BEHIND_RECHECK_MS),
    );
    state.waitingFor = behind;
    state.nextAttemptInMs = waitMs;
    setCurrentDetails(inLine);
    // (A deadline already past: no wait; `condition` with 0 would mean a patch marker, not a timeout.)
    if (waitMs > 0) await condition(() => woken, waitMs, { summary: inLine });
    delete state.waitingFor;
  }
  for (;;) {
    // A wake that arrives while the attempt runs is kept: the next wait then ends at once.
    woken = false;
    const plan = maxAttempts ? `attempt ${attempt} of ${maxAttempts}` : `attempt ${attempt}`;
    const input: AttemptInput = {
      jobId,
      attempt,
      now: Date.now(),
      jitter: Math.random(),
      lane: lane ?? 'fast',
    };
    const r: AttemptOutput =
      lane === 'slow' ? await lanes.slow(`${plan} (slow lane)`, input) : await lanes.fast(plan, input);
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
