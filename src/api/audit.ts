import { Router } from 'express';
import { handle, parseQuery } from '../http/body';
import { callerOf, type ApiDeps } from './context';
import { allow } from './routing';
import { auditQuery } from './schemas';

export interface AuditRow {
  cursor: string;
  at: Date;
  actor: string;
  action: string;
  object_type: string;
  object_id: string;
  before: string | null;
  after: string | null;
}

/** An audit row as the API answers it (its schema: responses.ts, auditItemResponse). */
export const auditItemView = (a: AuditRow) => ({
  cursor: a.cursor,
  at: a.at.toISOString(),
  actor: a.actor,
  action: a.action,
  objectType: a.object_type,
  objectId: a.object_id,
  ...(a.before !== null ? { before: a.before } : {}),
  ...(a.after !== null ? { after: a.after } : {}),
});

export function auditRoutes(deps: ApiDeps): Router {
  const r = Router();
  r.route('/v1/audit')
    .get(
      handle(async (req, res) => {
        const q = parseQuery(req, auditQuery);
        const rows = await deps.db.query<AuditRow>(
          `SELECT cursor, at, actor, action, object_type, object_id, before, after FROM audit_log
            WHERE tenant_id = $1 AND cursor > $2 ORDER BY cursor LIMIT $3`,
          [callerOf(res).tenantId, q.after, q.limit],
        );
        res.json({ items: rows.rows.map(auditItemView), nextCursor: rows.rows.at(-1)?.cursor ?? q.after });
      }),
    )
    .all(allow('GET'));
  return r;
}
