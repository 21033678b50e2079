import { Context as ActivityContext } from '@temporalio/activity';
import type { Logger } from 'pino';
import { contextLogger } from '../request-context';
import { inTx, preparedStatement, type Db, type Tx } from '../db/pool';
import { audit } from '../db/audit';
import type { JobStatus } from '../db/outbox';
import { isFinished } from '../db/outbox';
import { classifyAttempt, type AttemptResult, type Classification } from '../delivery/classify';
import { nextStep, type RetrySettings } from '../delivery/schedule';
import {
  checkUrlStatic,
  countRefusal,
  OutboundError,
  type AddressPolicy,
  type OutboundClient,
} from '../outbound';
import type { Keyring } from '../sealing/keyring';
import { unsealRow, type SecretRow } from '../sealing/secrets';
import { attemptDuration, configsFailing, deliveriesTotal } from '../metrics';
import { USER_AGENT } from '../version';
import { hostOf } from '../ids';
import { slotHeld, targetOf, type CallHealth, type HostSlots } from '../db/slots';
import { lineAfter, lineJobOf, ON_WIRE_LIMIT_MS, unfinishedJobsOf, type LineRow } from '../db/outbox';
import { heldBy, nextInLine, recheckMs } from '../delivery/order';
import type { EagerBudget, JobToStart } from '../temporal';
import type { LocalAttemptClock } from '../worker/workflow-slots';

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
   * The job waits for this earlier delivery of its config to end (DELIVERY_ORDER=per_config): no
   * attempt used; the end of that delivery wakes it. A workflow that does not know it waits `waitMs`
   * like a retry's wait, cut short by the same wake.
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
  /** Wakes running delivery workflows (granted a slot at their target): best effort, the timers repair. */
  wake: (jobIds: string[]) => Promise<void>;
  /**
   * Wakes jobs whose workflow may still be in its start delay (held behind an earlier job of its
   * config), starting it if it has not started (src/temporal.ts, wakeOrStartDeliveries): the next job
   * of a line, or the waiting jobs of a config that ended. Best effort: the start delay's end repairs.
   */
  wakeOrStart: (jobs: JobToStart[]) => Promise<void>;
  /** CONFIG_FAILING_AFTER: a config without a 2xx for this long (workflow time) stops as `failing`. */
  failingAfterMs: number;
  /** Times this worker's local attempts (the lean type's), for its workflow task slots; optional. */
  localAttempts?: LocalAttemptClock;
  /**
   * The eager starts in flight per tenant in this process (src/worker/eager-starts.ts): a job started
   * eagerly holds its tenant's place until its attempt call here ends; optional.
   */
  eagerStarts?: Pick<EagerBudget, 'done'>;
}

/** How often a job waiting in line for a slot asks again when no grant woke it (a lost signal). */
export const SLOT_RECHECK_MS = 5 * 60_000;

/**
 * How often a job held back by an earlier job of its config asks again when no wake came (a lost
 * signal): soon when the one ahead is on the wire (it ends within DELIVERY_TIMEOUT); else 5 min, or
 * 30 s after the line's head's next attempt when that is later (src/delivery/order.ts: recheckMs).
 */
export const ORDER_RECHECK_MS = 5 * 60_000;
export const ORDER_RECHECK_ON_WIRE_MS = 30_000;

/** Pushes read at most this much of the answer: its body is ignored. */
export const PUSH_RESPONSE_CAP = 64 * 1024;

/** How far config health's clock (`health_since`) may lag a 2xx: it is moved at most once a minute (migration 014). */
export const HEALTH_CLOCK_STEP_MS = 60_000;

interface Context {
  seq: string;
  push_seq: string | null;
  ordered: boolean;
  wake_early: boolean;
  held_by: string | null;
  status: JobStatus;
  reason: string | null;
  attempt_count: number;
  next_attempt_at: Date | null;
  deadline: Date;
  tenant_id: string;
  task_id: string;
  config_row_id: string;
  config_id: string;
  url: string;
  credential_id: string | null;
  config_status: 'active' | 'auth_failed' | 'stopped';
  config_reason: string | null;
  config_deleted: boolean;
  body: string;
  attempt_outcome: string | null | undefined;
  attempt_started: boolean;
  /** The sealed credential's row (sealed_secrets), read with the job: unsealed only for the request. */
  secret: SecretRow | null;
  /** A queued ordered job: the rows of its config's line that can hold it back (outbox_line_ahead). */
  line: LineRow[] | null;
}

type SecretColumns = {
  [K in keyof SecretRow as `secret_${K}`]: SecretRow[K] | null;
};

/**
 * One round trip: the job, its config, the event's body, this attempt's row, the sealed credential,
 * and for a queued ordered job the rows of its config's line that can hold it back.
 */
const readContext = preparedStatement<[string, number, number, number]>(
  'delivery.context',
  `SELECT j.seq, j.push_seq, j.ordered, j.wake_early, j.held_by, j.status, j.reason, j.attempt_count, j.next_attempt_at, j.deadline, j.tenant_id, j.task_id,
          j.config_row_id, j.config_id, c.url, c.credential_id, c.status AS config_status,
          c.status_reason AS config_reason, c.deleted_at IS NOT NULL AS config_deleted, e.body,
          a.outcome AS attempt_outcome, a.n IS NOT NULL AS attempt_started,
          s.tenant_id AS secret_tenant_id, s.purpose AS secret_purpose, s.key_id AS secret_key_id,
          s.iv AS secret_iv, s.ciphertext AS secret_ciphertext, s.tag AS secret_tag,
          CASE WHEN j.ordered AND j.status = 'queued' THEN
            (SELECT coalesce(json_agg(l), '[]') FROM outbox_line_ahead(j.config_row_id, j.seq, $3, $4) l)
          END AS line
     FROM delivery_jobs j
     JOIN push_configs c ON c.row_id = j.config_row_id
     JOIN task_events e ON e.id = j.event_id
     LEFT JOIN delivery_attempts a ON a.job_id = j.id AND a.n = $2
     LEFT JOIN sealed_secrets s ON s.id = c.credential_id
    WHERE j.id = $1`,
);

/** A queued job held by the job ahead in its config's line (a2a_push_outbox_held counts it). */
const markHeld = preparedStatement<[string, string]>(
  'delivery.hold',
  `UPDATE delivery_jobs SET held_by = $2 WHERE id = $1 AND status = 'queued' AND held_by IS DISTINCT FROM $2`,
);
const clearHeld = preparedStatement<[string]>(
  'delivery.unhold',
  `UPDATE delivery_jobs SET held_by = NULL WHERE id = $1 AND status = 'queued'`,
);

export const createDeliveryActivities = (deps: DeliveryDeps) => {
  const { db, logger } = deps;

  async function loadAttemptContext(jobId: string, n: number, nowMs: number): Promise<Context | undefined> {
    const r = await db.query<Omit<Context, 'secret'> & SecretColumns>(
      readContext([jobId, n, Math.round(nowMs), ON_WIRE_LIMIT_MS / 1000]),
    );
    const row = r.rows[0];
    if (!row) return undefined;
    const {
      secret_tenant_id,
      secret_purpose,
      secret_key_id,
      secret_iv,
      secret_ciphertext,
      secret_tag,
      ...ctx
    } = row;
    return {
      ...ctx,
      secret:
        secret_key_id === null
          ? null
          : {
              tenant_id: secret_tenant_id!,
              purpose: secret_purpose!,
              key_id: secret_key_id,
              iv: secret_iv!,
              ciphertext: secret_ciphertext!,
              tag: secret_tag!,
            },
    };
  }

  /** Ends the job without an attempt (no request was made in this call). */
  async function finishWithoutAttempt(
    jobId: string,
    status: JobStatus,
    reason: string | null,
  ): Promise<AttemptOutput> {
    const r = await db.query<{ status: JobStatus; attempt_count: number; reason: string | null }>(
      `UPDATE delivery_jobs SET status = $2, reason = $3, finished_at = now(), next_attempt_at = NULL
        WHERE id = $1 AND status IN ('queued', 'in_flight', 'waiting_retry')
        RETURNING status, attempt_count, reason`,
      [jobId, status, reason],
    );
    const row = r.rows[0];
    if (!row) return currentStatus(jobId);
    return { status: row.status, attempts: row.attempt_count, ...(row.reason ? { reason: row.reason } : {}) };
  }

  async function currentStatus(jobId: string): Promise<AttemptOutput> {
    const r = await db.query<{ status: JobStatus; attempt_count: number; reason: string | null }>(
      'SELECT status, attempt_count, reason FROM delivery_jobs WHERE id = $1',
      [jobId],
    );
    const row = r.rows[0];
    if (!row) return { status: 'cancelled', attempts: 0, reason: 'config_deleted' };
    return { status: row.status, attempts: row.attempt_count, ...(row.reason ? { reason: row.reason } : {}) };
  }

  /** After a retryable attempt n: the job waits for n+1, or ends exhausted or expired. */
  function planAfterRetry(n: number, input: AttemptInput, deadline: Date, retryAfterMs?: number) {
    return nextStep(n, input.now, deadline.getTime(), input.jitter, deps.retry, retryAfterMs);
  }

  type Recorded = Omit<Classification, 'outcome' | 'reason'> & {
    outcome: Classification['outcome'] | 'interrupted';
    reason: string | null;
    httpStatus?: number;
    error?: string;
  };

  /**
   * Records attempt n's outcome on its row and the job (outbox_attempt_end, migration 014), in one
   * round trip with what goes with it: `release`, the attempt's host slot given back first (with the
   * call's health for the slow lane).
   */
  async function recordOutcome(
    input: AttemptInput,
    ctx: Context,
    c: Recorded,
    durationMs: number | null,
    release?: { target: string; health: CallHealth },
  ): Promise<AttemptOutput> {
    const n = input.attempt;
    let status: JobStatus;
    let waitMs: number | undefined;
    if (c.jobStatus) status = c.jobStatus;
    else {
      const step = planAfterRetry(n, input, ctx.deadline, c.retryAfterMs);
      if (step.kind === 'wait') {
        status = 'waiting_retry';
        waitMs = step.waitMs;
      } else status = step.kind;
    }
    const final = isFinished(status);
    const slotSettings = deps.slots.settings;
    type Ended = {
      o_updated: JobStatus | null;
      o_cur_status: JobStatus;
      o_cur_attempts: number;
      o_granted: string[];
    };
    const write = async (q: Db | Tx) => {
      const r = await q.query<Ended>(
        `SELECT * FROM outbox_attempt_end($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                                          $14, $15, $16, $17, $18, $19, $20)`,
        [
          input.jobId,
          n,
          durationMs,
          c.outcome,
          c.httpStatus ?? null,
          c.error ?? null,
          c.retryAfterMs ?? null,
          status,
          c.reason,
          final,
          waitMs ?? null,
          input.now,
          ctx.config_row_id,
          release?.target ?? null,
          holderOf(input.jobId, n),
          release?.health ?? 'neutral',
          release ? deps.slots.capacityOf(release.target) : slotSettings.capacity,
          slotSettings.grantMs,
          slotSettings.suspectMs,
          slotSettings.waitMs,
        ],
      );
      const row = r.rows[0]!;
      wakeLater(row.o_granted);
      return row;
    };
    const answer = (row: Ended): AttemptOutput =>
      row.o_updated === null
        ? { status: row.o_cur_status, attempts: row.o_cur_attempts, outcome: c.outcome }
        : {
            status,
            attempts: n,
            outcome: c.outcome,
            ...(c.reason !== null ? { reason: c.reason } : {}),
            ...(c.httpStatus !== undefined ? { httpStatus: c.httpStatus } : {}),
            ...(waitMs !== undefined ? { waitMs } : {}),
          };
    const { configStatus } = c;
    if (!configStatus) return answer(await write(db));
    // The answer pauses or stops the config: that, and its audit row, in the same transaction.
    return inTx(db, async (tx) => {
      const row = await write(tx);
      if (row.o_updated === null) return answer(row);
      const cu = await tx.query(
        `UPDATE push_configs SET status = $2, status_reason = $3, status_changed_at = now()
          WHERE row_id = $1 AND status = 'active' AND deleted_at IS NULL`,
        [ctx.config_row_id, configStatus, c.reason],
      );
      if (cu.rowCount) await auditConfigStopped(tx, ctx, `${configStatus} (${c.reason ?? ''})`);
      return answer(row);
    });
  }

  /** The audit row of a config the service itself took out of `active` (paused, stopped, failing). */
  const auditConfigStopped = (tx: Tx, ctx: Context, after: string) =>
    audit(tx, {
      tenantId: ctx.tenant_id,
      actor: 'system',
      action: 'push_config.status_changed',
      objectType: 'push_config',
      objectId: `${ctx.task_id}/${ctx.config_id}`,
      before: 'active',
      after,
    });

  /** Wakes workflows; a lost wake is repaired by their own timers. */
  function wakeLater(jobIds: string[]): void {
    if (jobIds.length > 0) void deps.wake(jobIds).catch(() => undefined);
  }

  /** Wakes (or starts) jobs of the context's config, which may be held in their start delay. */
  function wakeOrStartLater(ctx: Context, jobIds: string[], undispatchedAfter?: string): void {
    if (jobIds.length === 0) return;
    const host = hostOf(ctx.url);
    const jobs = jobIds.map((id) => ({
      id,
      tenantId: ctx.tenant_id,
      taskId: ctx.task_id,
      configId: ctx.config_id,
      host,
      ...(undispatchedAfter !== undefined ? { undispatched: true, wokenBy: undispatchedAfter } : {}),
    }));
    void deps.wakeOrStart(jobs).catch(() => undefined);
  }

  /**
   * Who holds a slot or a place in line: the job's attempt, so that a stale run of an attempt (timed
   * out by Temporal while still on the wire) can never give back the slot of the job's next attempt.
   */
  const holderOf = (jobId: string, n: number) => `${jobId}:${n}`;

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
   * Config health (contract §10): a job of the config ended without a 2xx; when the config's last 2xx,
   * or its first attempt if it never had one, is CONFIG_FAILING_AFTER or more before `now` (workflow
   * time), the config stops as `failing` and its unfinished jobs are woken to end as a stopped config's do.
   * The clock (`health_since`) moves at most once a minute (migration 014), so it can be up to that
   * much older than the last 2xx: the config stops only once even that minute is past, never early
   * (at most a minute late).
   */
  async function checkConfigHealth(ctx: Context, jobId: string, now: number): Promise<void> {
    const stopped = await inTx(db, async (tx) => {
      // On the config row: a 2xx being recorded holds it, and this waits and sees the clock it set.
      const r = await tx.query(
        `UPDATE push_configs SET status = 'stopped', status_reason = 'failing', status_changed_at = now()
          WHERE row_id = $1 AND status = 'active' AND deleted_at IS NULL
            AND health_since <= to_timestamp(($2::bigint - $3::bigint - $4::bigint) / 1000.0)
          RETURNING row_id`,
        [ctx.config_row_id, now, deps.failingAfterMs, HEALTH_CLOCK_STEP_MS],
      );
      if (!r.rowCount) return false;
      await auditConfigStopped(tx, ctx, 'stopped (failing)');
      return true;
    });
    if (!stopped) return;
    configsFailing.inc();
    contextLogger(logger).warn(
      { jobId, taskId: ctx.task_id, configId: ctx.config_id, failingAfterMs: deps.failingAfterMs },
      'push config stopped: no 2xx for CONFIG_FAILING_AFTER',
    );
    wakeOrStartLater(ctx, await unfinishedJobsOf(db, ctx.config_row_id, jobId));
  }

  /** Ended without a 2xx after at least one attempt: the statuses config health looks at. */
  const endedUndelivered = (status: JobStatus, attempts: number) =>
    ['failed', 'exhausted', 'expired'].includes(status) || (status === 'superseded' && attempts > 0);

  /**
   * One delivery attempt. Throws only when the service itself failed before a request went out
   * (Postgres, unsealing): Temporal retries that, and no attempt is used.
   */
  async function attemptDelivery(input: AttemptInput): Promise<AttemptOutput> {
    // A local attempt (the lean type's fast lane) holds its run's workflow task slot: timed, so that a
    // run whose attempt hangs stops counting as in progress (src/worker/workflow-slots.ts).
    const clock = isLocalActivity() ? deps.localAttempts : undefined;
    const id = clock?.begin();
    try {
      return await attempt(input);
    } finally {
      if (id !== undefined) clock!.end(id);
      // Started eagerly, the job held its tenant's place until now (unless its end handed it on).
      deps.eagerStarts?.done(input.jobId);
    }
  }

  async function attempt(input: AttemptInput): Promise<AttemptOutput> {
    const ctx = await loadAttemptContext(input.jobId, input.attempt, input.now);
    if (!ctx)
      return {
        status: 'cancelled',
        attempts: 0,
        reason: 'config_deleted',
        maxAttempts: deps.retry.maxAttempts,
      };
    const out = await attemptOnce(input, ctx);
    if (out.waitMs === undefined && isFinished(out.status) && out.status !== 'delivered') {
      // Finished without a request in this call, or with one: nothing of it may keep a slot or a place.
      if (out.outcome === undefined) await leaveTarget(input, ctx.url);
      if (endedUndelivered(out.status, out.attempts)) await checkConfigHealth(ctx, input.jobId, input.now);
    }
    if (out.waitMs === undefined && isFinished(out.status) && ctx.ordered)
      await wakeLine(ctx, out.status, input.jobId);
    return { ...out, maxAttempts: deps.retry.maxAttempts };
  }

  /**
   * An ordered job has ended (final, nothing of it on the wire): the next job of its config's line
   * starts now. When the config itself ended (deleted, paused, stopped), its whole waiting line is
   * woken to end without attempts. A lost wake is repaired by the waiters' own rechecks.
   */
  async function wakeLine(ctx: Context, status: JobStatus, jobId: string): Promise<void> {
    if (['cancelled', 'auth_failed', 'stopped'].includes(status)) {
      wakeOrStartLater(ctx, await unfinishedJobsOf(db, ctx.config_row_id));
      return;
    }
    // Read after the job's end committed: a job that joined the line and saw this one unfinished just
    // before the commit is seen only by a read after it.
    const next = nextInLine(BigInt(ctx.seq), await lineAfter(db, ctx.config_row_id, ctx.seq));
    // Not started yet: it may start eagerly here, in the place this job held (src/temporal.ts).
    if (next) wakeOrStartLater(ctx, [next.id], next.dispatched === false ? jobId : undefined);
  }

  async function attemptOnce(input: AttemptInput, ctx: Context): Promise<AttemptOutput> {
    const n = input.attempt;
    if (isFinished(ctx.status)) {
      if (ctx.attempt_started && !ctx.attempt_outcome)
        // Ended (superseded, cancelled) while this attempt was on the wire, and its worker died: the
        // attempt is over; recorded so, it no longer holds its config's line.
        await db.query(
          `UPDATE delivery_attempts SET outcome = 'interrupted', error = 'interrupted'
            WHERE job_id = $1 AND n = $2 AND outcome IS NULL`,
          [input.jobId, n],
        );
      return {
        status: ctx.status,
        attempts: ctx.attempt_count,
        ...(ctx.reason ? { reason: ctx.reason } : {}),
      };
    }

    if (ctx.attempt_started) {
      if (ctx.attempt_outcome) {
        // This attempt completed before (the activity's answer was lost): answer from the stored row.
        const waitMs = ctx.next_attempt_at ? Math.max(0, ctx.next_attempt_at.getTime() - input.now) : 0;
        return {
          status: ctx.status,
          attempts: ctx.attempt_count,
          waitMs,
          ...(ctx.reason ? { reason: ctx.reason } : {}),
        };
      }
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

    if (ctx.config_deleted) return finishWithoutAttempt(input.jobId, 'cancelled', 'config_deleted');
    if (ctx.config_status !== 'active')
      return finishWithoutAttempt(input.jobId, ctx.config_status, ctx.config_reason);
    if (input.now > ctx.deadline.getTime()) return finishWithoutAttempt(input.jobId, 'expired', ctx.reason);
    // Before its scheduled time: an early attempt when a new event asked for one (wake_early, consumed
    // when the attempt starts, which also records it as early_taken); else keep the schedule.
    const early =
      ctx.status === 'waiting_retry' &&
      ctx.next_attempt_at !== null &&
      ctx.next_attempt_at.getTime() > input.now;
    if (early && !ctx.wake_early) {
      // Woken early with nothing to end it: keep the schedule.
      return {
        status: ctx.status,
        attempts: ctx.attempt_count,
        waitMs: ctx.next_attempt_at!.getTime() - input.now,
      };
    }
    if (ctx.ordered && ctx.status === 'queued') {
      // DELIVERY_ORDER=per_config: the first attempt waits until every earlier job of the config ended.
      const line = (ctx.line ?? []).map(lineJobOf);
      const ahead = heldBy(BigInt(ctx.seq), line);
      if (ahead) {
        await db.query(markHeld([input.jobId, ahead.id]));
        const recheck = recheckMs(ahead, line, input.now, {
          onWireMs: ORDER_RECHECK_ON_WIRE_MS,
          idleMs: ORDER_RECHECK_MS,
        });
        const untilDeadline = Math.max(0, ctx.deadline.getTime() - input.now) + 1_000;
        return {
          status: ctx.status,
          attempts: ctx.attempt_count,
          waitMs: Math.min(recheck, untilDeadline),
          waitingFor: ahead.id,
        };
      }
    }

    const verdict = checkUrlStatic(ctx.url, deps.policy);
    if (ctx.credential_id && !ctx.secret) throw new Error(`sealed secret ${ctx.credential_id} is missing`);
    const credential = ctx.secret ? unsealRow(deps.keyring, ctx.secret) : undefined;

    // A slot at the target, and only with it the attempt's start, in one statement (outbox_attempt_begin):
    // a call that finds its target full uses no attempt.
    const target = verdict.ok ? targetOf(ctx.url) : undefined;
    const slotSettings = deps.slots.settings;
    const begun = await db.query<{
      o_started: boolean;
      o_acquired: boolean;
      o_suspect: boolean;
      o_granted: string[];
      o_unknown: boolean;
    }>(
      'SELECT * FROM outbox_attempt_begin($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)',
      [
        input.jobId,
        n,
        input.now,
        ctx.config_row_id,
        early,
        target ?? null,
        holderOf(input.jobId, n),
        ctx.tenant_id,
        input.lane === 'fast',
        target ? deps.slots.capacityOf(target) : slotSettings.capacity,
        slotSettings.leaseMs,
        slotSettings.waitMs,
        slotSettings.grantMs,
        slotSettings.suspectMs,
        // The fast lane is for targets that answered a 2xx lately (migration 016).
        input.lane === 'fast' ? slotSettings.knownMs : null,
      ],
    );
    const b = begun.rows[0]!;
    wakeLater(b.o_granted);
    // Its line let it go: no longer held (a2a_push_outbox_held). The attempt's start cleared the mark; a
    // job that did not start (it waits for a slot, or moves to the slow lane) is cleared here.
    if (ctx.held_by !== null && !b.o_started) await db.query(clearHeld([input.jobId]));
    // A target without a recent 2xx (new, or gone quiet): no slot, no attempt here; the attempt goes to
    // the slow lane, so first contacts with dead hosts never take the slots healthy targets need (and
    // the lean type's local attempt never holds a workflow task for one). A 2xx there makes it known.
    if (b.o_unknown)
      return {
        status: ctx.status,
        attempts: ctx.attempt_count,
        ...(ctx.reason ? { reason: ctx.reason } : {}),
        waitMs: 0,
        lane: 'slow',
      };
    if (target) {
      const inSlowLane = input.lane === 'slow';
      const slot = deps.slots.answer(b, input.lane === 'fast', 'push');
      if (!slot.acquired) {
        const base = {
          status: ctx.status,
          attempts: ctx.attempt_count,
          ...(ctx.reason ? { reason: ctx.reason } : {}),
          ...(slot.suspect ? { lane: 'slow' as const } : {}),
        };
        // Moved to the slow lane: ask again there at once (it takes no slot and no place here).
        if (slot.suspect && !inSlowLane) return { ...base, waitMs: 0 };
        // In line: a grant wakes the workflow; the recheck covers a lost wake; the deadline still ends it.
        const untilDeadline = Math.max(0, ctx.deadline.getTime() - input.now) + 1_000;
        return { ...base, waitMs: Math.min(SLOT_RECHECK_MS, untilDeadline), waitingForSlot: hostOf(ctx.url) };
      }
    }

    // Not started (the job ended meanwhile): the slot went back in the same statement.
    if (!b.o_started) return currentStatus(input.jobId);
    const heldSince = performance.now();

    let result: AttemptResult;
    const t0 = performance.now();
    if (!verdict.ok) {
      countRefusal(verdict.rule);
      result = { kind: 'guard_refused', rule: verdict.rule };
    } else {
      const headers: Record<string, string> = {
        'content-type': 'application/a2a+json',
        'a2a-version': '1.0',
        'user-agent': USER_AGENT,
        'x-a2a-push-delivery': input.jobId,
      };
      // The event's number in its config's line: a receiver orders by it, drops repeats, sees gaps.
      if (ctx.push_seq !== null) headers['x-a2a-push-sequence'] = ctx.push_seq;
      if (credential !== undefined) headers.authorization = `Bearer ${credential}`;
      result = await deps.slots
        .holding(target!, holderOf(input.jobId, n), () => post(ctx.url, headers, ctx.body))
        .catch(async (err: unknown) => {
          // Cancelled (or failed before an answer): nothing of it is on the wire any more.
          await leaveTarget(input, ctx.url).catch(() => undefined);
          throw err;
        });
    }
    const durationMs = Math.round(performance.now() - t0);
    const c = classifyAttempt(result, Date.now());
    // A call that timed out, could not connect or took more than half its time marks its target for
    // the slow lane; a 2xx clears the mark (however long it took). The slot goes back as the outcome
    // is recorded (one statement).
    const health: CallHealth =
      result.kind === 'error' && ['timeout', 'connection', 'dns'].includes(result.code)
        ? 'suspect'
        : c.outcome === 'delivered'
          ? 'healthy'
          : durationMs > deps.timeoutMs / 2
            ? 'suspect'
            : 'neutral';
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
    if (target) slotHeld.observe((performance.now() - heldSince) / 1000);
    // The next attempt to a target that just timed out or refused runs in the slow lane.
    if (health === 'suspect' && out.waitMs !== undefined) out.lane = 'slow';
    return out;
  }

  /**
   * The POST itself: an answer, or the transport error it ended with. A cancelled activity (Temporal
   * cancelled it: timed out, its run evicted after a rerun took over, the worker shutting down) stops
   * its request and throws: nothing is recorded, and the attempt's rerun finds it `interrupted`.
   */
  async function post(url: string, headers: Record<string, string>, body: string): Promise<AttemptResult> {
    const signal = cancellationSignal();
    try {
      const res = await deps.http.request({
        method: 'POST',
        url,
        headers,
        body,
        timeoutMs: deps.timeoutMs,
        maxResponseBytes: PUSH_RESPONSE_CAP,
        ...(signal ? { signal } : {}),
      });
      const ra = res.headers['retry-after'];
      return { kind: 'response', status: res.status, ...(typeof ra === 'string' ? { retryAfter: ra } : {}) };
    } catch (err) {
      if (!(err instanceof OutboundError)) throw err;
      return err.code === 'guard_refused'
        ? { kind: 'guard_refused', rule: err.rule! }
        : { kind: 'error', code: err.code };
    }
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
