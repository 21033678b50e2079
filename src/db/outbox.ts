import type { Db, Tx } from './pool';
import { audit } from './audit';
import { appendConfigEvent } from './config-events';
import { MASK } from '../sealing/keyring';
import { makeDeliveryWorkflowId } from '../ids';
import { currentRequestId } from '../request-context';
import type { ConfigStatus, DueJob, JobStatus } from '../delivery/types';

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
  /** Config health (contract §11, migration 021), in workflow time. */
  last_delivered_at: Date | null;
  failing_since: Date | null;
  failed_jobs: number;
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
    health: {
      ...(r.last_delivered_at !== null ? { lastDeliveredAt: r.last_delivered_at.toISOString() } : {}),
      ...(r.failing_since !== null ? { failingSince: r.failing_since.toISOString() } : {}),
      failedJobs: r.failed_jobs,
    },
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

/**
 * Soft-deletes a config and shreds its credential, with its audit row and its `deleted` config event. Its
 * line ends as a whole (outbox_line_close): the
 * jobs not due end `cancelled` here, without a workflow; answers the due unfinished ones, whose
 * workflows are woken to end the same way.
 */
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
  await appendConfigEvent(tx, row.row_id, 'deleted', null);
  return closeLine(tx, row.row_id, 'cancelled', 'config_deleted');
}

/**
 * A config's line ends as a whole (the caller changed the config row: paused, stopped, deleted): its
 * jobs not due end with `status` here; answers the due unfinished ones but `except`, to wake.
 */
export async function closeLine(
  q: Db | Tx,
  configRowId: string,
  status: JobStatus,
  reason: string | null,
  except?: string,
): Promise<string[]> {
  const r = await q.query<{ id: string }>('SELECT outbox_line_close($1, $2, $3, $4) AS id', [
    configRowId,
    status,
    reason,
    except ?? null,
  ]);
  return r.rows.map((x) => x.id);
}

/** A write's new job: its id and config, and whether it waits for its line (not due). */
export interface WrittenJob {
  id: string;
  configId: string;
  /** The unended earlier job of its config it was written behind (DELIVERY_ORDER=per_config): not due. */
  behind?: string;
}

export interface WrittenEvent {
  eventId: string;
  jobs: WrittenJob[];
  /**
   * The jobs this write made due, leased to the writer when it asked (`leaseMs`): its new jobs that
   * head their line, and older ones whose line the bound moved on.
   */
  due: DueJob[];
  /** Jobs pushed out by the per-config bound: their running workflows are woken to end. */
  superseded: string[];
  /** Heads of ordered lines waiting for a retry, asked for one early attempt by this event: woken. */
  woken: string[];
}

/**
 * The outbox write: the event, one job per active config of the task, and the bound, in one statement
 * (atomic alone, or part of the caller's tx; migration 020). `leaseMs` leases the jobs it makes due to
 * this process, whose relay starts them at once; without it they are announced to every process's
 * claim run.
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
    leaseMs?: number | undefined;
    /** The writing request's trace context, kept on the jobs for their workflow starts (src/tracing.ts). */
    traceparent?: string | undefined;
    /** DELIVERY_ORDER=per_config: the new jobs wait for the earlier jobs of their config. */
    ordered?: boolean;
  },
): Promise<WrittenEvent> {
  const requestId = currentRequestId() ?? null;
  const w = await db.query<{
    o_event_id: string;
    o_job_ids: string[];
    o_config_ids: string[];
    o_urls: string[];
    o_superseded: string[];
    o_woken: string[];
    o_behind: Array<string | null>;
    o_due: DueJob[];
  }>('SELECT * FROM outbox_write_event($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)', [
    e.tenantId,
    e.taskId,
    e.kind,
    e.body,
    e.deadlineMs,
    requestId,
    e.leaseMs ?? null,
    e.boundPerConfig,
    e.traceparent ?? null,
    e.ordered ?? false,
  ]);
  const r = w.rows[0]!;
  const jobs = r.o_job_ids.map((id, i) => ({
    id,
    configId: r.o_config_ids[i]!,
    ...(r.o_behind[i] ? { behind: r.o_behind[i]! } : {}),
  }));
  const heads: DueJob[] = jobs
    .map((j, i) => ({ ...j, url: r.o_urls[i]! }))
    .filter((j) => !j.behind)
    .map((j) => ({
      id: j.id,
      tenantId: e.tenantId,
      taskId: e.taskId,
      configId: j.configId,
      url: j.url,
      requestId,
      traceparent: e.traceparent ?? null,
    }));
  return {
    eventId: r.o_event_id,
    jobs,
    due: [...heads, ...r.o_due],
    superseded: r.o_superseded,
    woken: r.o_woken,
  };
}

/**
 * After new jobs of these configs (their rows locked by the caller's transaction): the bound, then
 * each line's head due. Answers the superseded jobs (to wake) and the jobs made due.
 */
export async function afterWrite(
  tx: Tx,
  configRowIds: string[],
  bound: number,
  leaseMs: number | undefined,
): Promise<{ superseded: string[]; due: DueJob[] }> {
  const r = await tx.query<{ o_superseded: string[]; o_due: DueJob[] }>(
    'SELECT o_superseded, o_due FROM outbox_after_write($1::bigint[], $2, $3)',
    [configRowIds, bound, leaseMs ?? null],
  );
  return { superseded: r.rows[0]!.o_superseded, due: r.rows[0]!.o_due };
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
  request_id: string | null;
  traceparent: string | null;
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

/**
 * The earlier delivery of its config a job that waits for its line waits for: the nearest one that has
 * not ended (undefined for a job that does not wait).
 */
export async function waitingForOf(db: Db | Tx, j: JobRow): Promise<string | undefined> {
  if (j.status !== 'queued' || j.held_by === null) return undefined;
  const r = await db.query<{ id: string }>(
    `SELECT id FROM delivery_jobs WHERE config_row_id = $1 AND ordered AND finished_at IS NULL AND seq < $2
      ORDER BY seq DESC LIMIT 1`,
    [j.config_row_id, j.seq],
  );
  return r.rows[0]?.id ?? j.held_by;
}

/**
 * The API's view of a job. `waitingFor`: the earlier delivery of its config a job that waits for its
 * line waits for (waitingForOf). `workflowId`: once its workflow has started, or while it is due and
 * about to start; a job that waits for its line, or ended without ever starting one, has none.
 */
export function deliveryView(j: JobRow, attempts: AttemptRow[], waitingFor?: string) {
  const workflow =
    j.dispatched_at !== null || (j.finished_at === null && j.status === 'queued' && j.held_by === null);
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
    ...(workflow ? { workflowId: makeDeliveryWorkflowId(j.id) } : {}),
    createdAt: j.created_at.toISOString(),
    ...(j.finished_at !== null ? { finishedAt: j.finished_at.toISOString() } : {}),
  };
}
