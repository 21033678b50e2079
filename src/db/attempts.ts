import type { ConfigStatus, DueJob, JobStatus } from '../delivery/types';
import type { SecretRow } from '../sealing/secrets';
import { preparedStatement, type Db, type Tx } from './pool';
import type { SlotRelease, SlotRequest } from './slots';

/** A delivery attempt's statements (migration 020): its context, its begin, its end, a job's end without one. */

/** What an attempt reads before it decides: the job, its config, the event's body, its own row, the credential. */
export interface AttemptContext {
  seq: string;
  push_seq: string | null;
  ordered: boolean;
  wake_early: boolean;
  /** Not due: the earlier job of its config its line waits for (a run of the previous version only). */
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
  config_status: ConfigStatus;
  config_reason: string | null;
  config_deleted: boolean;
  body: string;
  attempt_outcome: string | null | undefined;
  attempt_started: boolean;
  /** The sealed credential's row (sealed_secrets), read with the job: unsealed only for the request. */
  secret: SecretRow | null;
}

type SecretColumns = { [K in keyof SecretRow as `secret_${K}`]: SecretRow[K] | null };

/** One round trip: the job, its config, the event's body, this attempt's row, the sealed credential. */
const readContext = preparedStatement<[string, number]>(
  'attempt.context',
  `SELECT j.seq, j.push_seq, j.ordered, j.wake_early, j.held_by, j.status, j.reason, j.attempt_count,
          j.next_attempt_at, j.deadline, j.tenant_id, j.task_id, j.config_row_id, j.config_id, c.url,
          c.credential_id, c.status AS config_status, c.status_reason AS config_reason,
          c.deleted_at IS NOT NULL AS config_deleted, e.body,
          a.outcome AS attempt_outcome, a.n IS NOT NULL AS attempt_started,
          s.tenant_id AS secret_tenant_id, s.purpose AS secret_purpose, s.key_id AS secret_key_id,
          s.iv AS secret_iv, s.ciphertext AS secret_ciphertext, s.tag AS secret_tag
     FROM delivery_jobs j
     JOIN push_configs c ON c.row_id = j.config_row_id
     JOIN task_events e ON e.id = j.event_id
     LEFT JOIN delivery_attempts a ON a.job_id = j.id AND a.n = $2
     LEFT JOIN sealed_secrets s ON s.id = c.credential_id
    WHERE j.id = $1`,
);

export async function loadAttemptContext(
  db: Db,
  jobId: string,
  n: number,
): Promise<AttemptContext | undefined> {
  const r = await db.query<Omit<AttemptContext, 'secret'> & SecretColumns>(readContext([jobId, n]));
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

export interface BeginAttempt {
  job: string;
  n: number;
  /** Workflow time (epoch ms): the attempt's started_at. */
  nowMs: number;
  config: string;
  /** An early attempt a new event asked for (wake_early), recorded as early_taken. */
  early: boolean;
}

export interface Begun {
  o_started: boolean;
  o_acquired: boolean;
  o_suspect: boolean;
  o_granted: string[];
  o_unknown: boolean;
}

const beginStatement = preparedStatement<[BeginAttempt, SlotRequest | null]>(
  'attempt.begin',
  'SELECT o_started, o_acquired, o_suspect, o_granted, o_unknown FROM outbox_attempt_begin($1::jsonb, $2::jsonb)',
);

/**
 * A slot at the target (`slot`; null: no target, a guard refusal is recorded as the attempt) and, only
 * with it, the attempt's start, in one statement: a call that finds its target full uses no attempt.
 */
export async function beginAttempt(db: Db, attempt: BeginAttempt, slot: SlotRequest | null): Promise<Begun> {
  return (await db.query<Begun>(beginStatement([attempt, slot]))).rows[0]!;
}

export interface EndAttempt {
  job: string;
  n: number;
  config: string;
  /** Workflow time (epoch ms). */
  nowMs: number;
  durationMs: number | null;
  outcome: string;
  httpStatus: number | null;
  error: string | null;
  retryAfterMs: number | null;
  /** The job's new status. */
  status: JobStatus;
  reason: string | null;
  final: boolean;
  waitMs: number | null;
  /** The answer pauses or stops the config: its line ends as a whole. */
  configStatus: ConfigStatus | null;
  /** How long the jobs this end makes due are leased to this process (null: announced to all). */
  leaseMs: number | null;
}

export interface Ended {
  o_updated: JobStatus | null;
  o_cur_status: JobStatus;
  o_cur_attempts: number;
  o_granted: string[];
  o_config_changed: boolean;
  o_wake: string[];
  o_due: DueJob[];
  /** The config events this end wrote: `recovered`, or the config's new status. */
  o_events: ConfigEventKind[];
}

const endStatement = preparedStatement<[EndAttempt, SlotRelease | null]>(
  'attempt.end',
  `SELECT o_updated, o_cur_status, o_cur_attempts, o_granted, o_config_changed, o_wake, o_due, o_events
     FROM outbox_attempt_end($1::jsonb, $2::jsonb)`,
);

/**
 * Attempt n's outcome on its row and the job, with what goes with it in the same transaction: the slot
 * back first (`slot`), the config paused or stopped and its line closed (`configStatus`), the line's next
 * job made due.
 */
export async function endAttempt(q: Db | Tx, attempt: EndAttempt, slot: SlotRelease | null): Promise<Ended> {
  return (await q.query<Ended>(endStatement([attempt, slot]))).rows[0]!;
}

export interface Finished {
  o_status: JobStatus | null;
  o_attempts: number | null;
  o_reason: string | null;
  o_due: DueJob[];
}

/** The job ends without an attempt in this call; the line's next job becomes due. */
export async function finishJob(
  db: Db,
  job: { job: string; status: JobStatus; reason: string | null; leaseMs: number | null },
): Promise<Finished> {
  const r = await db.query<Finished>(
    'SELECT o_status, o_attempts, o_reason, o_due FROM outbox_finish_job($1::jsonb)',
    [job],
  );
  return r.rows[0]!;
}

/** The job as it is now (undefined: gone with its config). */
export async function currentStatus(
  db: Db,
  jobId: string,
): Promise<{ status: JobStatus; attempt_count: number; reason: string | null } | undefined> {
  const r = await db.query<{ status: JobStatus; attempt_count: number; reason: string | null }>(
    'SELECT status, attempt_count, reason FROM delivery_jobs WHERE id = $1',
    [jobId],
  );
  return r.rows[0];
}

/** A change of a config's state that the config events feed reports (contract §11). */
export type ConfigEventKind = 'failing' | 'recovered' | 'auth_failed' | 'stopped' | 'deleted';

/**
 * Config health: job `jobId` of the config ended without a 2xx at `nowMs` (outbox_config_health, one
 * write of the config row; a job is counted once, however often this is asked). Answers the config
 * events it wrote (a `failing` warning, or `stopped`) and, when the config stopped, the due jobs of its
 * line to wake, but `jobId`.
 */
export async function configHealth(
  db: Db,
  configRowId: string,
  jobId: string,
  nowMs: number,
  rule: { failingAfterMs: number; warnAfterMs: number },
): Promise<{ events: ConfigEventKind[]; woken: string[] }> {
  const r = await db.query<{ o_events: ConfigEventKind[]; o_woken: string[] }>(
    'SELECT o_events, o_woken FROM outbox_config_health($1, $2, 1, $3, $4, $5, $2)',
    [configRowId, jobId, nowMs, rule.failingAfterMs, rule.warnAfterMs],
  );
  return { events: r.rows[0]!.o_events, woken: r.rows[0]!.o_woken };
}
