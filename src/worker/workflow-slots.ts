import type { CustomSlotSupplier, WorkflowSlotInfo } from '@temporalio/worker';

/**
 * The lean type's local attempts on the wire in this worker process, with their start times. A local
 * activity keeps its run's workflow task slot until it ends; the slot supplier below counts a run whose
 * attempt has been out for long as not in progress.
 */
export class LocalAttemptClock {
  private readonly starts = new Map<number, number>();
  private next = 0;

  constructor(private readonly now: () => number = Date.now) {}

  begin(): number {
    const id = ++this.next;
    this.starts.set(id, this.now());
    return id;
  }

  end(id: number): void {
    this.starts.delete(id);
  }

  /**
   * How many have been on the wire longer than `ms`. One out past `forgetMs` (longer than an attempt's
   * start-to-close timeout, 2 min) is forgotten: its run has let its slot go (timed out, evicted) even
   * if its promise never settled, and it must not stand for a task in progress.
   */
  olderThan(ms: number, forgetMs = FORGET_LOCAL_ATTEMPT_MS): number {
    const now = this.now();
    let n = 0;
    for (const [id, t] of this.starts) {
      if (now - t > forgetMs) this.starts.delete(id);
      else if (now - t > ms) n++;
    }
    return n;
  }
}

/** Past the attempt's start-to-close timeout (2 min): a local attempt still timed is forgotten. */
export const FORGET_LOCAL_ATTEMPT_MS = 3 * 60_000;

/** Of the `active` workflow tasks in progress, how many eagerly started ones can never take from the polls. */
export const POLL_ROOM = 2;

/**
 * Workflow task slots of a worker for eagerly started runs (its process's relay starts them), granted
 * even while its WORKER_WORKFLOW_TASK_SLOTS are in progress: their tasks count among those, up to all
 * but POLL_ROOM, so it polls less meanwhile. Its tenants' eager places bound who takes them
 * (src/starts/eager.ts).
 */
export const EAGER_SLOTS = 40;

/** How long a local attempt is out before its run stops counting as in progress. */
export const STUCK_LOCAL_ATTEMPT_MS = 1_000;

/**
 * The lean type's workflow task slots (issue 21): at most `active` workflow tasks in progress (the polls
 * under way and the tasks being run), a run whose local attempt has been on the wire longer than
 * `stuckMs` not counting; never more than `hardCap` in all.
 *
 * Why: a few slots keep a tenant's burst waiting in Temporal's task queue, where the fairness key
 * orders it, instead of first come inside the worker (benchmark 9 (d)); but a local attempt keeps its
 * slot, and with few fixed slots a receiver that hangs (a black hole takes up to its 8 host slots for
 * DELIVERY_TIMEOUT) left the worker no slot to take any other task. Here the hanging attempts keep
 * their slots but stop counting after `stuckMs`, so the worker takes new tasks again; the hard cap
 * bounds them all (the worker's cached runs, maxCachedWorkflows, must be at least that).
 *
 * A poll holds its slot while it waits (that is how the SDK counts them). An eager start asks with
 * `tryReserveSlot` and gets one of `eager` slots of its own (its permit says so), even while `active`
 * tasks are in progress. Its task counts as in progress all the same, so new polls wait while eagerly
 * started work runs (up to `active - POLL_ROOM` of it: polls always keep that room); tasks already
 * polled keep their slots, so at most `active` polled tasks run beside the eager ones. Which tenants
 * may start eagerly, and how many at once, is the starters' bound (src/worker/eager-starts.ts). A
 * refused eager start goes through the task queue. With `eager` 0, an eager start needs one of the
 * `active` slots, as a poll does.
 */
export function workflowSlotSupplier(
  active: number,
  hardCap: number,
  clock: LocalAttemptClock,
  stuckMs = STUCK_LOCAL_ATTEMPT_MS,
  eager = 0,
): CustomSlotSupplier<WorkflowSlotInfo> & { inProgress(): number; eagerInProgress(): number } {
  // Slots of polls (and, with `eager` 0, of eager starts): issued, and of those given a task.
  let issued = 0;
  let used = 0;
  // Slots of eager starts (with `eager` > 0), marked in their permit: issued, and given a task.
  let eagerIssued = 0;
  let eagerUsed = 0;
  const waiters: Array<() => void> = [];
  let timer: NodeJS.Timeout | undefined;
  // Every task in progress, eagerly started or polled.
  const inProgress = () => issued + eagerIssued - Math.min(used + eagerUsed, clock.olderThan(stuckMs));
  // A poll waits while `active` are in progress; eager tasks count up to `active - POLL_ROOM`, so that
  // eager work (several tenants' lines, each within its places) never stops the polls altogether: the
  // task queue still brings in timers, signals, other tenants' queued starts.
  const eagerCounted = Math.max(0, active - POLL_ROOM);
  const canIssue = () =>
    issued + eagerIssued < hardCap && inProgress() - Math.max(0, eagerIssued - eagerCounted) < active;
  const isEager = (permit: unknown) => (permit as { eager?: boolean } | null)?.eager === true;
  const pump = () => {
    while (waiters.length > 0 && canIssue()) {
      issued++;
      waiters.shift()!();
    }
    // A slot can also free by time alone (an attempt passing stuckMs): look again while polls wait.
    if (waiters.length > 0 && !timer)
      timer = setTimeout(() => {
        timer = undefined;
        pump();
      }, stuckMs / 4).unref();
  };
  return {
    type: 'custom',
    inProgress,
    eagerInProgress: () => eagerIssued,
    reserveSlot(_ctx, abort) {
      // The SDK aborts a waiting poll only when it stops polling (shutdown); it expects the signal's
      // own reason back.
      if (abort.aborted) return Promise.reject(abort.reason as Error);
      if (waiters.length === 0 && canIssue()) {
        issued++;
        return Promise.resolve({});
      }
      return new Promise((resolve, reject) => {
        const grant = () => resolve({});
        waiters.push(grant);
        abort.addEventListener(
          'abort',
          () => {
            const i = waiters.indexOf(grant);
            if (i < 0) return; // granted already
            waiters.splice(i, 1);
            reject(abort.reason as Error);
          },
          { once: true },
        );
        pump();
      });
    },
    tryReserveSlot() {
      if (eager > 0) {
        if (eagerIssued >= eager || issued + eagerIssued >= hardCap) return null;
        eagerIssued++;
        return { eager: true };
      }
      if (!canIssue()) return null;
      issued++;
      return {};
    },
    markSlotUsed(ctx) {
      if (isEager(ctx.permit)) eagerUsed++;
      else used++;
    },
    releaseSlot(ctx) {
      if (isEager(ctx.permit)) {
        eagerIssued = Math.max(0, eagerIssued - 1);
        if (ctx.slotInfo) eagerUsed = Math.max(0, eagerUsed - 1);
      } else {
        issued = Math.max(0, issued - 1);
        if (ctx.slotInfo) used = Math.max(0, used - 1);
      }
      pump();
    },
  };
}
