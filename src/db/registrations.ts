import type { Db, Tx } from './pool';

export type RegistrationStatus = 'pending' | 'active' | 'resolved' | 'failed' | 'deleted';

export interface RegistrationRow {
  id: string;
  tenant_id: string;
  mode: 'embedded' | 'separate';
  status: RegistrationStatus;
  agent_url: string;
  agent_token_id: string | null;
  remote_task_id: string | null;
  remote_state: string | null;
  push_enabled: boolean;
  reason: string | null;
  callback_hash: Buffer | null;
  remote_config_made: boolean;
  workflow_started: boolean;
  callbacks_received: string;
  callbacks_late: string;
  created_at: Date;
  resolved_at: Date | null;
}

export async function getRegistration(db: Db | Tx, tenantId: string, id: string, lock = false) {
  const r = await db.query<RegistrationRow & { pending: string }>(
    `SELECT r.*, (SELECT count(*) FROM inbox_callbacks c WHERE c.registration_id = r.id AND c.processed_at IS NULL) AS pending
       FROM registrations r WHERE r.id = $1 AND r.tenant_id = $2 ${lock ? 'FOR UPDATE OF r' : ''}`,
    [id, tenantId],
  );
  return r.rows[0];
}

export function registrationView(r: RegistrationRow & { pending: string }) {
  return {
    id: r.id,
    mode: r.mode,
    status: r.status,
    agent: { url: r.agent_url },
    ...(r.remote_task_id !== null ? { remoteTaskId: r.remote_task_id } : {}),
    ...(r.remote_state !== null ? { remoteState: r.remote_state } : {}),
    pushEnabled: r.push_enabled,
    ...(r.reason !== null ? { reason: r.reason } : {}),
    callbacks: {
      received: Number(r.callbacks_received),
      pending: Number(r.pending),
      late: Number(r.callbacks_late),
    },
    createdAt: r.created_at.toISOString(),
    ...(r.resolved_at !== null ? { resolvedAt: r.resolved_at.toISOString() } : {}),
  };
}

export interface FeedItemRow {
  cursor: string;
  registration_id: string;
  remote_task_id: string | null;
  kind: 'state' | 'failed';
  state: string | null;
  reason: string | null;
  terminal: boolean;
  observed_at: Date;
}

export const feedItemView = (f: FeedItemRow) => ({
  cursor: f.cursor,
  registrationId: f.registration_id,
  ...(f.remote_task_id !== null ? { remoteTaskId: f.remote_task_id } : {}),
  kind: f.kind,
  ...(f.state !== null ? { state: f.state } : {}),
  ...(f.reason !== null ? { reason: f.reason } : {}),
  terminal: f.terminal,
  observedAt: f.observed_at.toISOString(),
});

export async function readFeed(db: Db, tenantId: string, after: string, limit: number) {
  const r = await db.query<FeedItemRow>(
    `SELECT cursor, registration_id, remote_task_id, kind, state, reason, terminal, observed_at
       FROM feed_items WHERE tenant_id = $1 AND cursor > $2 ORDER BY cursor LIMIT $3`,
    [tenantId, after, limit],
  );
  return r.rows;
}

/**
 * Marks a registration's unprocessed callbacks processed (those up to `upTo` when given): they stop
 * counting against the inbox bounds, which the counters' triggers give back (migrations 005, 007).
 */
export async function markCallbacksProcessed(tx: Tx, registrationId: string, upTo?: string): Promise<void> {
  await tx.query(
    `UPDATE inbox_callbacks SET processed_at = now()
      WHERE registration_id = $1 AND processed_at IS NULL AND ($2::bigint IS NULL OR id <= $2)`,
    [registrationId, upTo ?? null],
  );
}

export const FEED_CHANNEL = 'a2a_push_feed';

/**
 * Appends a feed item. The per-tenant transaction lock makes cursor order equal commit order, so a
 * reader paging by cursor never skips an item that commits late. NOTIFY wakes long-polling readers.
 */
export async function appendFeedItem(
  tx: Tx,
  item: {
    tenantId: string;
    registrationId: string;
    remoteTaskId: string | null;
    kind: 'state' | 'failed';
    state?: string;
    reason?: string;
    terminal: boolean;
  },
): Promise<boolean> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtext('a2a_push_feed:' || $1))`, [item.tenantId]);
  const r = await tx.query(
    `INSERT INTO feed_items (tenant_id, registration_id, remote_task_id, kind, state, reason, terminal)
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (registration_id) WHERE terminal DO NOTHING`,
    [
      item.tenantId,
      item.registrationId,
      item.remoteTaskId,
      item.kind,
      item.state ?? null,
      item.reason ?? null,
      item.terminal,
    ],
  );
  if (r.rowCount) await tx.query('SELECT pg_notify($1, $2)', [FEED_CHANNEL, item.tenantId]);
  return (r.rowCount ?? 0) > 0;
}
