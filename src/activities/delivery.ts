import { Context as ActivityContext } from '@temporalio/activity';
import type { Logger } from 'pino';
import { contextLogger } from '../request-context';
import { inTx, type Db } from '../db/pool';
import { audit } from '../db/audit';
import {
  beginAttempt,
  configFailing,
  currentStatus,
  endAttempt,
  finishJob,
  loadAttemptContext,
  type AttemptContext,
  type Ended,
} from '../db/attempts';
import { targetOf, type HostSlots } from '../db/slots';
import { classifyAttempt, type AttemptResult, type Classification } from '../delivery/classify';
import { callHealth, endedUndelivered, type CallHealth } from '../delivery/health';
import { nextStep, type RetrySettings } from '../delivery/schedule';
import { isFinished, type DueHandoff, type DueJob, type JobStatus } from '../delivery/types';
import { hostOf } from '../ids';
import { attemptDuration, configsFailing, deliveriesTotal } from '../metrics';
import { checkUrlStatic, countRefusal, type AddressPolicy, type OutboundClient } from '../outbound';
import type { Keyring } from '../sealing/keyring';
import { unsealRow } from '../sealing/secrets';
import { pushOnce } from './push';

/** Workflow time and a sample of the workflow's deterministic random: every decision is in Temporal time. */
export interface AttemptInput {
  jobId: string;
  attempt: number;
  now: number;
  jitter: number;
  /**
   * The lane this call runs in (its task queue). `fast` from the workflow that knows lanes: a target
   * in the slow lane then takes no slot here. Absent (a run of the workflow before lanes): the call
   * takes its slot wherever it runs, as that workflow cannot move.
   */
  lane?: 'slow' | 'fast';
}

export interface AttemptOutput {
  /** The job's status after this call. */
  status: JobStatus;
  /** DELIVERY_MAX_ATTEMPTS, for the operator's view of the plan ("attempt 3 of 8"). */
  maxAttempts?: number;
  /** Attempts used so far. */
  attempts: number;
  /** Present when an attempt was made (or found interrupted) in this call. */
  outcome?: Classification['outcome'] | 'interrupted';
  reason?: string;
  httpStatus?: number;
  /** Present when the job waits for another attempt (or for a slot at its target). */
  waitMs?: number;
  /** The job waits for a slot at this host (OUTBOUND_HOST_CONCURRENCY), not for a retry: no attempt used. */
  waitingForSlot?: string;
  /** The next call belongs in the slow lane: its target recently timed out, refused or was slow. */
  lane?: 'slow';
  /**
   * The job is not due: it waits for this earlier delivery of its config to end. Only a run of the
   * previous version asks before its job is due (it started before); no attempt is used, and the job's
   * becoming due wakes it (src/starts/client.ts, wakeLegacyRuns).
   */
  waitingFor?: string;
}

export interface DeliveryDeps {
  db: Db;
  keyring: Keyring;
  http: OutboundClient;
  policy: AddressPolicy;
  retry: RetrySettings;
  timeoutMs: number;
  logger: Logger;
  /** The host slots (OUTBOUND_HOST_CONCURRENCY), shared by every worker through Postgres. */
  slots: HostSlots;
  /** Wakes running delivery workflows (granted a slot, or their line closed): best effort, timers repair. */
  wake: (jobIds: string[]) => Promise<void>;
  /** Where the jobs an attempt's end makes due go: this process's relay. */
  due: DueHandoff;
  /** CONFIG_FAILING_AFTER: a config without a 2xx for this long (workflow time) stops as `failing`. */
  failingAfterMs: number;
  /** Times this worker's local attempts, for its workflow task slots (src/worker/workflow-slots.ts). */
  localAttempts?: { begin(): number; end(id: number): void };
  /** A job started eagerly holds its tenant's eager place until its attempt call here ends. */
  eagerStarts?: { done(jobId: string): void };
}

/** How often a job waiting in line for a slot asks again when no grant woke it (a lost signal). */
export const SLOT_RECHECK_MS = 5 * 60_000;

/** How often a run of the previous version whose job is not due asks again when no wake came. */
export const ORDER_RECHECK_MS = 5 * 60_000;

/** What one call answers, and the jobs its statements made due (handed to the relay after the call). */
type Answer = AttemptOutput & { due?: DueJob[] };

export const createDeliveryActivities = (deps: DeliveryDeps) => {
  const { db, logger } = deps;

  /**
   * Who holds a slot or a place in line: the job's attempt, so that a stale run of an attempt (timed
   * out by Temporal while still on the wire) can never give back the slot of the job's next attempt.
   */
  const holderOf = (jobId: string, n: number) => `${jobId}:${n}`;

  /** Wakes workflows; a lost wake is repaired by their own timers. */
  function wakeLater(jobIds: string[]): void {
    if (jobIds.length > 0) void deps.wake(jobIds).catch(() => undefined);
  }

  /** Ends the job without an attempt (no request was made in this call). */
  async function finishWithoutAttempt(
    ctx: AttemptContext,
    jobId: string,
    status: JobStatus,
    reason: string | null,
  ) {
    const f = await finishJob(db, {
      job: jobId,
      status,
      reason,
      leaseMs: deps.due.leaseMs(ctx.tenant_id) ?? null,
    });
    if (f.o_status === null) return { status: 'cancelled' as const, attempts: 0, reason: 'config_deleted' };
    return {
      status: f.o_status,
      attempts: f.o_attempts ?? 0,
      ...(f.o_reason ? { reason: f.o_reason } : {}),
      due: f.o_due,
    };
  }

  async function statusNow(jobId: string): Promise<Answer> {
    const row = await currentStatus(db, jobId);
    if (!row) return { status: 'cancelled', attempts: 0, reason: 'config_deleted' };
    return { status: row.status, attempts: row.attempt_count, ...(row.reason ? { reason: row.reason } : {}) };
  }

  type Recorded = Omit<Classification, 'outcome' | 'reason'> & {
    outcome: Classification['outcome'] | 'interrupted';
    reason: string | null;
    httpStatus?: number;
    error?: string;
  };

  /**
   * Records attempt n's outcome on its row and the job (outbox_attempt_end), in one statement with what
   * goes with it: `release`, the attempt's host slot given back first (with the call's health for the
   * slow lane); a config the answer pauses or stops, its line closed, and its audit row (then in one
   * transaction); the line's next job made due.
   */
  async function recordOutcome(
    input: AttemptInput,
    ctx: AttemptContext,
    c: Recorded,
    durationMs: number | null,
    release?: { target: string; health: CallHealth },
  ): Promise<Answer> {
    const n = input.attempt;
    let status: JobStatus;
    let waitMs: number | undefined;
    if (c.jobStatus) status = c.jobStatus;
    else {
      const step = nextStep(n, input.now, ctx.deadline.getTime(), input.jitter, deps.retry, c.retryAfterMs);
      if (step.kind === 'wait') {
        status = 'waiting_retry';
        waitMs = step.waitMs;
      } else status = step.kind;
    }
    const end = (q: Db | Parameters<typeof endAttempt>[0]) =>
      endAttempt(
        q,
        {
          job: input.jobId,
          n,
          config: ctx.config_row_id,
          nowMs: input.now,
          durationMs,
          outcome: c.outcome,
          httpStatus: c.httpStatus ?? null,
          error: c.error ?? null,
          retryAfterMs: c.retryAfterMs ?? null,
          status,
          reason: c.reason,
          final: isFinished(status),
          waitMs: waitMs ?? null,
          configStatus: c.configStatus ?? null,
          leaseMs: deps.due.leaseMs(ctx.tenant_id) ?? null,
        },
        release ? deps.slots.releaseOf(release.target, holderOf(input.jobId, n), release.health) : null,
      );
    const answer = (row: Ended): Answer => {
      wakeLater([...row.o_granted, ...row.o_wake]);
      return row.o_updated === null
        ? { status: row.o_cur_status, attempts: row.o_cur_attempts, outcome: c.outcome, due: row.o_due }
        : {
            status,
            attempts: n,
            outcome: c.outcome,
            ...(c.reason !== null ? { reason: c.reason } : {}),
            ...(c.httpStatus !== undefined ? { httpStatus: c.httpStatus } : {}),
            ...(waitMs !== undefined ? { waitMs } : {}),
            due: row.o_due,
          };
    };
    if (!c.configStatus) return answer(await end(db));
    // The answer pauses or stops the config: that, its audit row and its closed line in one transaction.
    return answer(
      await inTx(db, async (tx) => {
        const row = await end(tx);
        if (row.o_config_changed) await auditConfigStopped(tx, ctx, `${c.configStatus} (${c.reason ?? ''})`);
        return row;
      }),
    );
  }

  /** The audit row of a config the service itself took out of `active` (paused, stopped, failing). */
  const auditConfigStopped = (tx: Parameters<typeof audit>[0], ctx: AttemptContext, after: string) =>
    audit(tx, {
      tenantId: ctx.tenant_id,
      actor: 'system',
      action: 'push_config.status_changed',
      objectType: 'push_config',
      objectId: `${ctx.task_id}/${ctx.config_id}`,
      before: 'active',
      after,
    });

  /** The attempt leaves its target's line or slot (if it had either): the freed room goes to the next waiter. */
  async function leaveTarget(
    input: AttemptInput,
    url: string,
    health: CallHealth = 'neutral',
    /**
     * A rerun of attempt n that found it started without an outcome: the first run's slot goes back
     * unless that run is still on the wire (its worker was silent, not dead: its lease is fresh).
     */
    unlessLive = false,
  ): Promise<void> {
    let target: string;
    try {
      target = targetOf(url);
    } catch {
      return;
    }
    const holder = holderOf(input.jobId, input.attempt);
    wakeLater(
      await (unlessLive
        ? deps.slots.releaseUnlessLive(target, holder, health)
        : deps.slots.release(target, holder, health)),
    );
  }

  /**
   * Config health (contract §10): a job of the config ended without a 2xx at `now` (workflow time);
   * the rule is outbox_config_failing's. A config it stops has its line closed (the jobs not due end
   * `stopped` at once) and its due jobs woken to end the same way.
   */
  async function checkConfigHealth(ctx: AttemptContext, jobId: string, now: number): Promise<void> {
    const woken = await configFailing(db, ctx.config_row_id, now, deps.failingAfterMs, jobId);
    if (!woken) return;
    configsFailing.inc();
    contextLogger(logger).warn(
      { jobId, taskId: ctx.task_id, configId: ctx.config_id, failingAfterMs: deps.failingAfterMs },
      'push config stopped: no 2xx for CONFIG_FAILING_AFTER',
    );
    wakeLater(woken);
  }

  /**
   * One delivery attempt. Throws only when the service itself failed before a request went out
   * (Postgres, unsealing): Temporal retries that, and no attempt is used.
   */
  async function attemptDelivery(input: AttemptInput): Promise<AttemptOutput> {
    // A local attempt (the lean type's fast lane) holds its run's workflow task slot: timed, so that a
    // run whose attempt hangs stops counting as in progress (src/worker/workflow-slots.ts).
    const clock = isLocalActivity() ? deps.localAttempts : undefined;
    const id = clock?.begin();
    let answer: Answer;
    try {
      answer = await attempt(input);
    } finally {
      if (id !== undefined) clock!.end(id);
      // Started eagerly, the job held its tenant's place until now: the next job of its line takes it.
      deps.eagerStarts?.done(input.jobId);
    }
    const { due, ...out } = answer;
    if (due && due.length > 0) deps.due.take(due);
    return { ...out, maxAttempts: deps.retry.maxAttempts };
  }

  async function attempt(input: AttemptInput): Promise<Answer> {
    const ctx = await loadAttemptContext(db, input.jobId, input.attempt);
    if (!ctx) return { status: 'cancelled', attempts: 0, reason: 'config_deleted' };
    const out = await attemptOnce(input, ctx);
    if (out.waitMs === undefined && isFinished(out.status) && out.status !== 'delivered') {
      // Finished without a request in this call, or with one: nothing of it may keep a slot or a place.
      if (out.outcome === undefined) await leaveTarget(input, ctx.url);
      if (endedUndelivered(out.status, out.attempts)) await checkConfigHealth(ctx, input.jobId, input.now);
    }
    return out;
  }

  async function attemptOnce(input: AttemptInput, ctx: AttemptContext): Promise<Answer> {
    const n = input.attempt;
    const keep = (extra: Partial<Answer> = {}): Answer => ({
      status: ctx.status,
      attempts: ctx.attempt_count,
      ...(ctx.reason ? { reason: ctx.reason } : {}),
      ...extra,
    });
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
      // usual wait. Its slot (held by the dead worker's lease) goes back now; not if its lease is
      // fresh: then that worker is alive and its request still on the wire (the lean type's rerun
      // after a workflow task timeout, or a heartbeat timeout while the worker was stalled).
      deliveriesTotal.inc({ outcome: 'interrupted' });
      await leaveTarget(input, ctx.url, 'neutral', true);
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
