import { ApplicationFailure, Context as ActivityContext } from '@temporalio/activity';
import { contextLogger } from '../request-context';
import { beginAttempt, loadAttemptContext, type AttemptContext } from '../db/attempts';
import { targetOf } from '../db/slots';
import { classifyAttempt, type AttemptResult, type Classification } from '../delivery/classify';
import { callHealth, endedUndelivered } from '../delivery/health';
import { isFinished } from '../delivery/types';
import { hostOf } from '../ids';
import { attemptDuration, deliveriesTotal } from '../metrics';
import { checkUrlStatic, countRefusal } from '../outbound';
import { unsealRow } from '../sealing/secrets';
import { pushOnce } from './push';
import type { Answer, AttemptInput, AttemptOutput, DeliveryDeps } from './delivery-types';
import { createOutcomes } from './outcome';

/** How often a job waiting in line for a slot asks again when no grant woke it (a lost signal). */
export const SLOT_RECHECK_MS = 5 * 60_000;

/** How often a run of the previous version whose job is not due asks again when no wake came. */
export const ORDER_RECHECK_MS = 5 * 60_000;

export const createDeliveryActivities = (deps: DeliveryDeps) => {
  const { db, logger } = deps;
  const {
    holderOf,
    wakeLater,
    finishWithoutAttempt,
    statusNow,
    recordOutcome,
    leaveTarget,
    stillOnWire,
    checkConfigHealth,
  } = createOutcomes(deps);

  /**
   * One delivery attempt. Throws only when the service itself failed before a request went out
   * (Postgres, unsealing): Temporal retries that, and no attempt is used.
   */
  async function attemptDelivery(input: AttemptInput): Promise<AttemptOutput> {
    // A local attempt (the lean type's fast lane) holds its run's workflow task slot: timed, so that a
    // run whose attempt hangs stops counting as in progress (src/worker/workflow-slots.ts).
    const clock = isLocalActivity() ? deps.localAttempts : undefined;
    const id = clock?.begin();
    let handedOver = false;
    // Once the job's end is recorded: started eagerly, it held its tenant's place until now (the next
    // job of its line takes it), and the jobs its end made due go to the relay at once.
    const handOver = (due: Answer['due']) => {
      if (handedOver) return;
      handedOver = true;
      deps.eagerStarts?.done(input.jobId);
      if (due && due.length > 0) deps.due.take(due);
    };
    try {
      const ctx = await loadAttemptContext(db, input.jobId, input.attempt);
      if (!ctx)
        return {
          status: 'cancelled',
          attempts: 0,
          reason: 'config_deleted',
          maxAttempts: deps.retry.maxAttempts,
        };
      const { due, ...out } = await attemptOnce(input, ctx);
      handOver(due);
      if (out.waitMs === undefined && isFinished(out.status) && out.status !== 'delivered') {
        // Finished without a request in this call, or with one: nothing of it may keep a slot or a place.
        if (out.outcome === undefined) await leaveTarget(input, ctx.url);
        if (endedUndelivered(out.status, out.attempts)) await checkConfigHealth(ctx, input.jobId, input.now);
      }
      return { ...out, maxAttempts: deps.retry.maxAttempts };
    } finally {
      if (id !== undefined) clock!.end(id);
      handOver(undefined);
    }
  }

  async function attemptOnce(input: AttemptInput, ctx: AttemptContext): Promise<Answer> {
    const n = input.attempt;
    const keep = (extra: Partial<Answer> = {}): Answer => ({
      status: ctx.status,
      attempts: ctx.attempt_count,
      ...(ctx.reason ? { reason: ctx.reason } : {}),
      ...extra,
    });
    // A rerun found attempt n started without an outcome while its first run, on a worker that was
    // only silent, still has the request on the wire (the lean type's rerun after a workflow task
    // timeout, or a heartbeat timeout while the worker was stalled): that run records what happens.
    // This one asks again later (Temporal's retry), and then answers from the stored row.
    if (ctx.attempt_started && !ctx.attempt_outcome && (await stillOnWire(input, ctx.url)))
      throw ApplicationFailure.retryable(
        `attempt ${n} of job ${input.jobId} is still on the wire`,
        'AttemptOnWire',
      );
    if (isFinished(ctx.status)) {
      // Ended (superseded, cancelled) while this attempt was on the wire, and its worker died: the
      // attempt is over; recorded so, its job has ended and no longer holds its line.
      if (ctx.attempt_started && !ctx.attempt_outcome) {
        const jobStatus = ctx.status as NonNullable<Classification['jobStatus']>;
        const r = await recordOutcome(
          input,
          ctx,
          { outcome: 'interrupted', reason: ctx.reason, error: 'interrupted', jobStatus },
          null,
        );
        return keep(r.due ? { due: r.due } : {});
      }
      return keep();
    }
    if (ctx.attempt_started) {
      // This attempt completed before (the activity's answer was lost): answer from the stored row.
      if (ctx.attempt_outcome)
        return keep({
          waitMs: ctx.next_attempt_at ? Math.max(0, ctx.next_attempt_at.getTime() - input.now) : 0,
        });
      // A worker died during this attempt's request: it counts, and the next one follows after the
      // usual wait. Its slot (held by the dead worker's lease) goes back now.
      deliveriesTotal.inc({ outcome: 'interrupted' });
      await leaveTarget(input, ctx.url);
      return recordOutcome(
        input,
        ctx,
        { outcome: 'interrupted', reason: ctx.reason, error: 'interrupted' },
        null,
      );
    }

    if (ctx.config_deleted) return finishWithoutAttempt(ctx, input.jobId, 'cancelled', 'config_deleted');
    if (ctx.config_status !== 'active')
      return finishWithoutAttempt(ctx, input.jobId, ctx.config_status, ctx.config_reason);
    if (input.now > ctx.deadline.getTime())
      return finishWithoutAttempt(ctx, input.jobId, 'expired', ctx.reason);
    // Not due (a run of the previous version, started before its line let it go): it waits.
    if (ctx.status === 'queued' && ctx.held_by !== null) {
      const untilDeadline = Math.max(0, ctx.deadline.getTime() - input.now) + 1_000;
      return keep({ waitMs: Math.min(ORDER_RECHECK_MS, untilDeadline), waitingFor: ctx.held_by });
    }
    // Before its scheduled time: an early attempt when a new event asked for one (wake_early, consumed
    // when the attempt starts, which also records it as early_taken); else keep the schedule.
    const early =
      ctx.status === 'waiting_retry' &&
      ctx.next_attempt_at !== null &&
      ctx.next_attempt_at.getTime() > input.now;
    if (early && !ctx.wake_early)
      return {
        status: ctx.status,
        attempts: ctx.attempt_count,
        waitMs: ctx.next_attempt_at!.getTime() - input.now,
      };

    const verdict = checkUrlStatic(ctx.url, deps.policy);
    if (ctx.credential_id && !ctx.secret) throw new Error(`sealed secret ${ctx.credential_id} is missing`);
    const credential = ctx.secret ? unsealRow(deps.keyring, ctx.secret) : undefined;

    const target = verdict.ok ? targetOf(ctx.url) : undefined;
    const fast = input.lane === 'fast';
    const b = await beginAttempt(
      db,
      { job: input.jobId, n, nowMs: input.now, config: ctx.config_row_id, early },
      target
        ? {
            ...deps.slots.request(target, holderOf(input.jobId, n), ctx.tenant_id, fast),
            // The fast lane is for targets that answered a 2xx lately.
            knownMs: fast ? deps.slots.settings.knownMs : null,
          }
        : null,
    );
    wakeLater(b.o_granted);
    // A target without a recent 2xx (new, or gone quiet): no slot, no attempt here; the attempt goes to
    // the slow lane, so first contacts with dead hosts never take the slots healthy targets need (and
    // the lean type's local attempt never holds a workflow task for one). A 2xx there makes it known.
    if (b.o_unknown) return keep({ waitMs: 0, lane: 'slow' });
    if (target) {
      const slot = deps.slots.answer(b, fast, 'push');
      if (!slot.acquired) {
        const lane = slot.suspect ? { lane: 'slow' as const } : {};
        // Moved to the slow lane: ask again there at once (it takes no slot and no place here).
        if (slot.suspect && fast) return keep({ ...lane, waitMs: 0 });
        // In line: a grant wakes the workflow; the recheck covers a lost wake; the deadline still ends it.
        const untilDeadline = Math.max(0, ctx.deadline.getTime() - input.now) + 1_000;
        return keep({
          ...lane,
          waitMs: Math.min(SLOT_RECHECK_MS, untilDeadline),
          waitingForSlot: hostOf(ctx.url),
        });
      }
    }
    // Not started (the job ended meanwhile): the slot went back in the same statement.
    if (!b.o_started) return statusNow(input.jobId);

    let result: AttemptResult;
    const t0 = performance.now();
    if (!verdict.ok) {
      countRefusal(verdict.rule);
      result = { kind: 'guard_refused', rule: verdict.rule };
    } else
      result = await pushOnce(
        deps,
        { jobId: input.jobId, ctx, credential, target: target!, holder: holderOf(input.jobId, n) },
        cancellationSignal(),
      ).catch(async (err: unknown) => {
        // Cancelled (or failed before an answer): nothing of it is on the wire any more.
        await leaveTarget(input, ctx.url).catch(() => undefined);
        throw err;
      });
    const durationMs = Math.round(performance.now() - t0);
    const c = classifyAttempt(result, Date.now());
    const health = callHealth(result, c, durationMs, deps.timeoutMs);
    attemptDuration.observe(durationMs / 1000);
    deliveriesTotal.inc({ outcome: c.outcome });
    contextLogger(logger).info(
      { jobId: input.jobId, attempt: n, outcome: c.outcome, reason: c.reason, durationMs },
      'delivery attempt',
    );
    const out = await recordOutcome(
      input,
      ctx,
      {
        ...c,
        ...(result.kind === 'response' ? { httpStatus: result.status } : {}),
        ...(result.kind === 'error' ? { error: result.code } : {}),
        ...(result.kind === 'guard_refused' ? { error: c.reason } : {}),
      },
      durationMs,
      target ? { target, health } : undefined,
    );
    // The next attempt to a target that just timed out or refused runs in the slow lane.
    if (health === 'suspect' && out.waitMs !== undefined) out.lane = 'slow';
    return out;
  }

  return { attemptDelivery };
};

export type DeliveryActivities = ReturnType<typeof createDeliveryActivities>;

/** The running activity's context, or undefined outside an activity (tests call the functions directly). */
function currentActivity(): ActivityContext | undefined {
  try {
    return ActivityContext.current();
  } catch {
    return undefined;
  }
}

/** Whether the running activity is a local activity. */
const isLocalActivity = () => currentActivity()?.info.isLocal ?? false;

/** The running activity's cancellation signal (normal and local activities alike). */
const cancellationSignal = () => currentActivity()?.cancellationSignal;
