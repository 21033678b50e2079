import type { Db } from '../db/pool';
import { inTx } from '../db/pool';
import { audit } from '../db/audit';
import {
  configHealth,
  currentStatus,
  endAttempt,
  finishJob,
  type AttemptContext,
  type Ended,
} from '../db/attempts';
import { targetOf } from '../db/slots';
import type { Classification } from '../delivery/classify';
import type { CallHealth } from '../delivery/health';
import { nextStep } from '../delivery/schedule';
import { isFinished, type JobStatus } from '../delivery/types';
import { configEvents, configsFailing } from '../metrics';
import { contextLogger } from '../request-context';
import type { Answer, AttemptInput, DeliveryDeps } from './delivery-types';

/** An attempt's outcome as recorded: the classification, or `interrupted` (a worker died mid-request). */
export type Recorded = Omit<Classification, 'outcome' | 'reason'> & {
  outcome: Classification['outcome'] | 'interrupted';
  reason: string | null;
  httpStatus?: number;
  error?: string;
};

/** The target of a URL, or none (a URL the guard refuses has none). */
const targetOrNone = (url: string): string | undefined => {
  try {
    return targetOf(url);
  } catch {
    return undefined;
  }
};

/**
 * How an attempt's outcome, or a job's end without one, is written, with what goes with it in the same
 * transaction (the slot back, the config paused or stopped and its line closed, the line's next job
 * made due), and config health after it.
 */
export function createOutcomes(deps: DeliveryDeps) {
  const { db, logger } = deps;

  /** The config events this process wrote (a2a_push_config_events_total). */
  const countEvents = (kinds: readonly string[]) => {
    for (const kind of kinds) configEvents.inc({ kind });
  };

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
      countEvents(row.o_events);
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
  ): Promise<void> {
    const target = targetOrNone(url);
    if (target === undefined) return;
    wakeLater(await deps.slots.release(target, holderOf(input.jobId, input.attempt), health));
  }

  /**
   * Whether attempt n's request is still on the wire: a rerun found it started without an outcome, and
   * the first run's worker was only silent, not dead (its slot's lease is fresh).
   */
  async function stillOnWire(input: AttemptInput, url: string): Promise<boolean> {
    const target = targetOrNone(url);
    return target !== undefined && deps.slots.onWire(target, holderOf(input.jobId, input.attempt));
  }

  /**
   * Config health (contract §§10, 11): a job of the config ended without a 2xx at `now` (workflow time);
   * the rule is outbox_config_health's: a warning once per failing stretch, or the stop. A config it stops has its line closed (the jobs not due end
   * `stopped` at once) and its due jobs woken to end the same way.
   */
  async function checkConfigHealth(ctx: AttemptContext, jobId: string, now: number): Promise<void> {
    const h = await configHealth(db, ctx.config_row_id, jobId, now, deps.health);
    countEvents(h.events);
    if (h.events.includes('failing'))
      contextLogger(logger).warn(
        { jobId, taskId: ctx.task_id, configId: ctx.config_id, warnAfterMs: deps.health.warnAfterMs },
        'push config failing: no 2xx for CONFIG_WARN_AFTER',
      );
    if (!h.events.includes('stopped')) return;
    configsFailing.inc();
    contextLogger(logger).warn(
      { jobId, taskId: ctx.task_id, configId: ctx.config_id, failingAfterMs: deps.health.failingAfterMs },
      'push config stopped: no 2xx for CONFIG_FAILING_AFTER',
    );
    wakeLater(h.woken);
  }

  return {
    holderOf,
    wakeLater,
    finishWithoutAttempt,
    statusNow,
    recordOutcome,
    leaveTarget,
    stillOnWire,
    checkConfigHealth,
  };
}
