import crypto from 'node:crypto';
import type { Db, Tx } from './pool';
import { audit } from './audit';
import { MASK } from '../sealing/keyring';
import { makeDeliveryWorkflowId } from '../ids';
import { currentRequestId } from '../request-context';

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
  const jobs = await tx.query<{ id: string }>(
    `SELECT id FROM delivery_jobs WHERE config_row_id = $1 AND status IN ('queued', 'in_flight', 'waiting_retry')`,
    [row.row_id],
  );
  return jobs.rows.map((j) => j.id);
}

export interface WrittenEvent {
  eventId: string;
  deliveries: Array<{ id: string; configId: string }>;
  /** Jobs pushed out by the per-config bound; their workflows are woken to end. */
  superseded: string[];
}

/** The outbox write: the event, one job per active config of the task, and the bound, in the caller's tx. */
export async function writeEvent(
  tx: Tx,
  e: {
    tenantId: string;
    taskId: string;
    kind: string;
    body: string;
    deadlineMs: number;
    boundPerConfig: number;
  },
): Promise<WrittenEvent> {
  const ev = await tx.query<{ id: string }>(
    'INSERT INTO task_events (tenant_id, task_id, kind, body) VALUES ($1, $2, $3, $4) RETURNING id',
    [e.tenantId, e.taskId, e.kind, e.body],
  );
  const eventId = ev.rows[0]!.id;
  // Locking the configs serialises writers per config, so the bound below counts exactly.
  const configs = await tx.query<{ row_id: string; id: string }>(
    `SELECT row_id, id FROM push_configs
      WHERE tenant_id = $1 AND task_id = $2 AND deleted_at IS NULL AND status = 'active'
      ORDER BY row_id FOR UPDATE`,
    [e.tenantId, e.taskId],
  );
  if (configs.rows.length === 0) return { eventId, deliveries: [], superseded: [] };
  const deliveries = configs.rows.map((c) => ({ id: crypto.randomUUID(), configId: c.id }));
  await tx.query(
    `INSERT INTO delivery_jobs (id, tenant_id, event_id, config_row_id, task_id, config_id, deadline, request_id)
     SELECT j.id, $1, $2, j.row_id, $3, j.config_id, ev.created_at + make_interval(secs => $4::double precision / 1000), $8
       FROM unnest($5::uuid[], $6::bigint[], $7::text[]) AS j (id, row_id, config_id),
            (SELECT created_at FROM task_events WHERE id = $2) ev`,
    [
      e.tenantId,
      eventId,
      e.taskId,
      e.deadlineMs,
      deliveries.map((d) => d.id),
      configs.rows.map((c) => c.row_id),
      configs.rows.map((c) => c.id),
      currentRequestId() ?? null,
    ],
  );
  const superseded = await supersedeOverBound(
    tx,
    configs.rows.map((c) => c.row_id),
    e.boundPerConfig,
  );
  return { eventId, deliveries, superseded };
}

/** Marks the oldest unfinished jobs of each config superseded while a config holds more than the bound. */
export async function supersedeOverBound(tx: Tx, configRowIds: string[], bound: number): Promise<string[]> {
  const r = await tx.query<{ id: string }>(
    `WITH ranked AS (
       SELECT id, row_number() OVER (PARTITION BY config_row_id ORDER BY seq DESC) AS rn
         FROM delivery_jobs
        WHERE config_row_id = ANY($1::bigint[]) AND status IN ('queued', 'in_flight', 'waiting_retry'))
     UPDATE delivery_jobs j SET status = 'superseded', finished_at = now(), next_attempt_at = NULL
       FROM ranked WHERE j.id = ranked.id AND ranked.rn > $2
     RETURNING j.id`,
    [configRowIds, bound],
  );
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

export function deliveryView(j: JobRow, attempts: AttemptRow[]) {
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
    deadline: j.deadline.toISOString(),
    workflowId: makeDeliveryWorkflowId(j.id),
    createdAt: j.created_at.toISOString(),
    ...(j.finished_at !== null ? { finishedAt: j.finished_at.toISOString() } : {}),
  };
}
