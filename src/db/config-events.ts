import type { Db, Tx } from './pool';

/** The config events feed (contract §11, migration 021): written by SQL, read here. */

/** Writers NOTIFY this channel with the tenant id at commit. */
export const CONFIG_EVENTS_CHANNEL = 'a2a_push_config_events';

export interface ConfigEventRow {
  cursor: string;
  task_id: string;
  config_id: string;
  kind: string;
  reason: string | null;
  at: Date;
}

export const configEventView = (e: ConfigEventRow) => ({
  cursor: e.cursor,
  taskId: e.task_id,
  configId: e.config_id,
  kind: e.kind,
  ...(e.reason !== null ? { reason: e.reason } : {}),
  at: e.at.toISOString(),
});

/** The tenant's events after `after`, in cursor (commit) order. */
export async function readConfigEvents(db: Db, tenantId: string, after: string, limit: number) {
  const r = await db.query<ConfigEventRow>(
    `SELECT cursor, task_id, config_id, kind, reason, at
       FROM config_events WHERE tenant_id = $1 AND cursor > $2 ORDER BY cursor LIMIT $3`,
    [tenantId, after, limit],
  );
  return r.rows;
}

/** A config's event, in the caller's transaction (config_event_append). */
export async function appendConfigEvent(
  tx: Tx,
  configRowId: string,
  kind: 'deleted',
  reason: string | null,
): Promise<void> {
  await tx.query('SELECT config_event_append($1, $2, $3, now())', [configRowId, kind, reason]);
}
