import type { Db, Tx } from './pool';

export interface AuditEntry {
  tenantId: string;
  /** api key id, or `system` */
  actor: string;
  action: string;
  objectType: string;
  objectId: string;
  before?: string;
  after?: string;
}

/** Appends one audit row. Callers pass statuses, never secrets. */
export async function audit(tx: Tx | Db, e: AuditEntry): Promise<void> {
  await tx.query(
    `INSERT INTO audit_log (tenant_id, actor, action, object_type, object_id, before, after)
     VALUES ($1, $2, $3, $4, $5, $6, $7)`,
    [e.tenantId, e.actor, e.action, e.objectType, e.objectId, e.before ?? null, e.after ?? null],
  );
}
