import { preparedStatement, type Db, type Tx } from './pool';
import { audit } from './audit';
import { MASK } from '../sealing/keyring';
import { hostOf, makeDeliveryWorkflowId } from '../ids';
import { hostAndTarget } from './slots';
import { currentRequestId } from '../request-context';
import type { LineJob } from '../delivery/order';
import type { JobToStart } from '../temporal';

export type ConfigStatus = 'active' | 'auth_failed' | 'stopped';
export const UNFINISHED = ['queued', 'in_flight', 'waiting_retry'] as const;
export type JobStatus =
  | (typeof UNFINISHED)[number]
  | 'delivered'
  | 'failed'
  | 'exhausted'
  | 'expired'
  | 'cancelled'
  | 'superseded'
  | 'auth_failed'
  | 'stopped';
export const isFinished = (s: JobStatus) => !(UNFINISHED as readonly string[]).includes(s);

export interface ConfigRow {
  row_id: string;
  tenant_id: string;
  task_id: string;
  id: string;
  url: string;
  token: string | null;
  auth_scheme: string | null;
  credential_id: string | null;
  status: ConfigStatus;
  status_reason: string | null;
  created_at: Date;
  status_changed_at: Date;
  deleted_at: Date | null;
}

/** The API's view of a config (TaskPushNotificationConfig plus our status fields). */
export function configView(r: ConfigRow) {
  return {
    id: r.id,
    taskId: r.task_id,
    url: r.url,
    ...(r.token !== null ? { token: r.token } : {}),
    ...(r.auth_scheme !== null ? { authentication: { scheme: r.auth_scheme, credentials: MASK } } : {}),
    status: r.status,
    ...(r.status_reason !== null ? { statusReason: r.status_reason } : {}),
    createdAt: r.created_at.toISOString(),
    statusChangedAt: r.status_changed_at.toISOString(),
  };
}

export async function getLiveConfig(db: Db | Tx, tenantId: string, taskId: string, id: string) {
  const r = await db.query<ConfigRow>(
    'SELECT * FROM push_configs WHERE tenant_id = $1 AND task_id = $2 AND id = $3 AND deleted_at IS NULL',
    [tenantId, taskId, id],
  );
  return r.rows[0];
}

export async function listConfigs(
  db: Db,
  q: { tenantId: string; taskId?: string; status?: ConfigStatus; after: string; limit: number },
): Promise<{ rows: ConfigRow[]; next?: string }> {
  const r = await db.query<ConfigRow>(
    `SELECT * FROM push_configs
      WHERE tenant_id = $1 AND deleted_at IS NULL AND row_id > $2
        AND ($3::text IS NULL OR task_id = $3) AND ($4::text IS NULL OR status = $4)
      ORDER BY row_id LIMIT $5`,
    [q.tenantId, q.after, q.taskId ?? null, q.status ?? null, q.limit + 1],
  );
  const rows = r.rows.slice(0, q.limit);
  return r.rows.length > q.limit ? { rows, next: rows.at(-1)!.row_id } : { rows };
}

/** The ids of a config's unfinished jobs (to wake them when the config ended), but `except`. */
export async function unfinishedJobsOf(db: Db | Tx, configRowId: string, except?: string): Promise<string[]> {
  const r = await db.query<{ id: string }>(
    `SELECT id FROM delivery_jobs
      WHERE config_row_id = $1 AND id IS DISTINCT FROM $2::uuid AND status IN ('queued', 'in_flight', 'waiting_retry')`,
    [configRowId, except ?? null],
  );
  return r.rows.map((j) => j.id);
}

/**
 * Marks jobs whose workflow has started (by the dispatcher, or by a wake that found it not started):
 * they leave the claim run for good.
 */
export async function markDispatched(db: Db | Tx, ids: string[]): Promise<void> {
  if (ids.length === 0) return;
  await db.query(markDispatchedStatement([ids]));
}

const markDispatchedStatement = preparedStatement<[string[]]>(
  'outbox.dispatched',
  'UPDATE delivery_jobs SET dispatched_at = now(), dispatch_lease = NULL WHERE id = ANY($1::uuid[]) AND dispatched_at IS NULL',
);

/** What a workflow start of these jobs needs (ids and the target's host: nothing secret). */
export async function jobsToStart(db: Db | Tx, ids: string[]): Promise<JobToStart[]> {
  const r = await db.query<{
    id: string;
    tenant_id: string;
    task_id: string;
    config_id: string;
    url: string;
  }>(
    `SELECT j.id, j.tenant_id, j.task_id, j.config_id, c.url
       FROM delivery_jobs j JOIN push_configs c ON c.row_id = j.config_row_id
      WHERE j.id = ANY($1::uuid[])`,
    [ids],
  );
  return r.rows.map((j) => ({
    id: j.id,
    tenantId: j.tenant_id,
    taskId: j.task_id,
    configId: j.config_id,
    host: hostOf(j.url),
  }));
}

/** Soft-deletes a config and shreds its credential. Returns the ids of its unfinished jobs, to wake them. */
export async function deleteConfig(
  tx: Tx,
  tenantId: string,
  taskId: string,
  id: string,
  actor: string,
): Promise<string[] | undefined> {
  const r = await tx.query<ConfigRow>(
    `UPDATE push_configs SET deleted_at = now()
      WHERE tenant_id = $1 AND task_id = $2 AND id = $3 AND deleted_at IS NULL RETURNING *`,
    [tenantId, taskId, id],
  );
  const row = r.rows[0];
  if (!row) return undefined;
  if (row.credential_id !== null)
    await tx.query('DELETE FROM sealed_secrets WHERE id = $1', [row.credential_id]);
  await audit(tx, {
    tenantId,
    actor,
    action: 'push_config.deleted',
    objectType: 'push_config',
    objectId: `${taskId}/${id}`,
    before: row.status,
    after: 'deleted',
  });
  return unfinishedJobsOf(tx, row.row_id);
}

export interface WrittenEvent {
  eventId: string;
  /** The new jobs, with what starting each one's workflow needs (ids and the target's host: nothing secret). */
  starts: Array<{
    id: string;
    configId: string;
    host: string;
    /** The target (`host:port`) its attempts go to: the dispatcher's lane hint reads it. */
    target?: string;
    /** DELIVERY_ORDER=per_config: the unfinished earlier job of its config this one waits for. */
    behind?: string;
    /** With `behind`: the job's deadline (epoch ms, from the write's start; the row's is at most a little earlier). */
    deadlineAt?: number;
  }>;
  /** Jobs pushed out by the per-config bound; their workflows are woken to end. */
  superseded: string[];
  /** Heads of ordered lines waiting for a retry, asked for one early attempt by this event: woken. */
  woken: string[];
}

/**
 * The outbox write: the event, one job per active config of the task, and the bound, in one statement
 * (atomic alone, or part of the caller's tx). `leaseMs` marks the new jobs as being started by this process (the dispatcher's direct start),
 * so that no claim run starts them meanwhile; a lost direct start is claimed again once it expires.
 */
export async function writeEvent(
  db: Db | Tx,
  e: {
    tenantId: string;
    taskId: string;
    kind: string;
    body: string;
    deadlineMs: number;
    boundPerConfig: number;
    leaseMs?: number;
    /** The writing request's trace context, kept on the jobs for their workflow starts (src/tracing.ts). */
    traceparent?: string;
    /** DELIVERY_ORDER=per_config: the new jobs wait for the earlier jobs of their config. */
    ordered?: boolean;
  },
): Promise<WrittenEvent> {
  // One statement (migration 006): the event, its task's active configs (locked, which serialises
  // writers per config so the bound counts exactly), one job per config, and the bound.
  const deadlineAt = Date.now() + e.deadlineMs;
  const w = await db.query<{
    o_event_id: string;
    o_job_ids: string[];
    o_config_ids: string[];
    o_urls: string[];
    o_superseded: string[];
    o_woken: string[];
    o_behind: Array<string | null>;
  }>('SELECT * FROM outbox_write_event($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)', [
    e.tenantId,
    e.taskId,
    e.kind,
    e.body,
    e.deadlineMs,
    currentRequestId() ?? null,
    e.leaseMs ?? null,
    e.boundPerConfig,
    e.traceparent ?? null,
    e.ordered ?? false,
  ]);
  const r = w.rows[0]!;
  return {
    eventId: r.o_event_id,
    starts: r.o_job_ids.map((id, i) => ({
      id,
      configId: r.o_config_ids[i]!,
      ...hostAndTarget(r.o_urls[i]!),
      ...(r.o_behind[i] ? { behind: r.o_behind[i]!, deadlineAt } : {}),
    })),
    superseded: r.o_superseded,
    woken: r.o_woken,
  };
}

/** Marks the oldest unfinished jobs of each config superseded while a config holds more than the bound. */
export async function supersedeOverBound(tx: Tx, configRowIds: string[], bound: number): Promise<string[]> {
  const r = await tx.query<{ id: string }>('SELECT outbox_supersede_over_bound($1::bigint[], $2) AS id', [
    configRowIds,
    bound,
  ]);
  return r.rows.map((x) => x.id);
}

export interface JobRow {
  id: string;
  seq: string;
  tenant_id: string;
  event_id: string;
  config_row_id: string;
  task_id: string;
  config_id: string;
  status: JobStatus;
  reason: string | null;
  attempt_count: number;
  next_attempt_at: Date | null;
  deadline: Date;
  retry_of: string | null;
  /** The event's number in its config's line (X-A2A-Push-Sequence); null for jobs written before it. */
  push_seq: string | null;
  ordered: boolean;
  held_by: string | null;
  wake_early: boolean;
  early_taken: boolean;
  dispatched_at: Date | null;
  created_at: Date;
  finished_at: Date | null;
}

export interface AttemptRow {
  job_id: string;
  n: number;
  started_at: Date;
  duration_ms: number | null;
  outcome: string | null;
  http_status: number | null;
  error: string | null;
  retry_after_ms: string | null;
}

export async function getJob(db: Db | Tx, tenantId: string, id: string): Promise<JobRow | undefined> {
  const r = await db.query<JobRow>('SELECT * FROM delivery_jobs WHERE id = $1 AND tenant_id = $2', [
    id,
    tenantId,
  ]);
  return r.rows[0];
}

export async function getAttempts(db: Db | Tx, jobIds: string[]): Promise<Map<string, AttemptRow[]>> {
  const out = new Map<string, AttemptRow[]>(jobIds.map((id) => [id, []]));
  if (jobIds.length === 0) return out;
  const r = await db.query<AttemptRow>(
    'SELECT * FROM delivery_attempts WHERE job_id = ANY($1::uuid[]) ORDER BY job_id, n',
    [jobIds],
  );
  for (const a of r.rows) out.get(a.job_id)!.push(a);
  return out;
}

export function deliveryView(j: JobRow, attempts: AttemptRow[], waitingFor?: string) {
  return {
    id: j.id,
    eventId: j.event_id,
    configId: j.config_id,
    taskId: j.task_id,
    status: j.status,
    ...(j.reason !== null ? { reason: j.reason } : {}),
    attempts: attempts.map((a) => ({
      n: a.n,
      startedAt: a.started_at.toISOString(),
      ...(a.duration_ms !== null ? { durationMs: a.duration_ms } : {}),
      ...(a.outcome !== null ? { outcome: a.outcome } : {}),
      ...(a.http_status !== null ? { httpStatus: a.http_status } : {}),
      ...(a.error !== null ? { error: a.error } : {}),
      ...(a.retry_after_ms !== null ? { retryAfterMs: Number(a.retry_after_ms) } : {}),
    })),
    ...(j.next_attempt_at !== null ? { nextAttemptAt: j.next_attempt_at.toISOString() } : {}),
    ...(j.push_seq !== null ? { sequence: Number(j.push_seq) } : {}),
    ...(waitingFor !== undefined ? { waitingFor } : {}),
    ...(j.retry_of !== null ? { retryOf: j.retry_of } : {}),
    deadline: j.deadline.toISOString(),
    workflowId: makeDeliveryWorkflowId(j.id),
    createdAt: j.created_at.toISOString(),
    ...(j.finished_at !== null ? { finishedAt: j.finished_at.toISOString() } : {}),
  };
}

/**
 * The jobs of a config's line that can hold the job at `seq` back (src/delivery/order.ts): the nearest
 * earlier ordered job that has not finished, the nearest earlier one with an attempt on the wire, and
 * the line's head (the first that has not finished: its retry schedule bounds how long the line waits).
 * An attempt without an outcome that started more than ON_WIRE_LIMIT before `nowMs` (workflow time)
 * is taken as gone: no attempt outlives its activity's start-to-close timeout (2 min).
 */
export async function lineAhead(
  db: Db | Tx,
  configRowId: string,
  seq: string | bigint,
  nowMs: number,
): Promise<LineJob[]> {
  const r = await db.query<LineRow>('SELECT * FROM outbox_line_ahead($1, $2, $3, $4)', [
    configRowId,
    String(seq),
    Math.round(nowMs),
    ON_WIRE_LIMIT_MS / 1000,
  ]);
  return r.rows.map(lineJobOf);
}

/** A row of outbox_line_ahead (migration 013), as pg gives it or as json_agg wrote it. */
export interface LineRow {
  id: string;
  seq: string | number;
  status: JobStatus;
  open_attempt: boolean;
  next_attempt_at: Date | string | null;
}

export const lineJobOf = (x: LineRow): LineJob => ({
  id: x.id,
  seq: BigInt(x.seq),
  status: x.status,
  openAttempt: x.open_attempt,
  ...(x.next_attempt_at !== null ? { nextAttemptAt: new Date(x.next_attempt_at).getTime() } : {}),
});

/** An attempt row without an outcome older than this is not on the wire any more (see lineAhead). */
export const ON_WIRE_LIMIT_MS = 3 * 60_000;

const readLineAfter = preparedStatement<[string, string]>(
  'outbox.line_after',
  `SELECT id, seq, status, dispatched_at IS NOT NULL AS dispatched FROM delivery_jobs
    WHERE config_row_id = $1 AND seq > $2 AND ordered AND status IN ('queued', 'in_flight', 'waiting_retry')
    ORDER BY seq LIMIT 1`,
);

/**
 * The first later ordered job of the config's line that has not finished: the one to wake when a job
 * ends, with whether its workflow's start is on record.
 */
export async function lineAfter(
  db: Db | Tx,
  configRowId: string,
  seq: string | bigint,
): Promise<Array<LineJob & { dispatched: boolean }>> {
  const r = await db.query<{ id: string; seq: string; status: JobStatus; dispatched: boolean }>(
    readLineAfter([configRowId, String(seq)]),
  );
  return r.rows.map((x) => ({
    id: x.id,
    seq: BigInt(x.seq),
    status: x.status,
    openAttempt: false,
    dispatched: x.dispatched,
  }));
}
