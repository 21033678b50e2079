import crypto from 'node:crypto';
import type { Tx } from '../db/pool';
import { Problem } from '../http/problem';

/** JSON with sorted keys: two bodies that differ only in key order or spacing are the same request. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v !== null && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

export interface StoredAnswer {
  status: number;
  body: unknown;
}

export const IDEMPOTENCY_TTL_HOURS = 24;

/**
 * Claims an Idempotency-Key inside the effect's transaction. The claim row is inserted first: a concurrent
 * repeat blocks on the primary key until this transaction ends, then finds the committed answer (or, if
 * this one rolled back on an error, claims the key itself). Returns the stored answer of an earlier
 * request, or undefined when the caller goes on and must call `store` before committing.
 */
export async function claimIdempotencyKey(
  tx: Tx,
  tenantId: string,
  key: string,
  request: { method: string; path: string; body: unknown },
): Promise<StoredAnswer | undefined> {
  if (key.length === 0 || key.length > 255)
    throw new Problem('validation', 'Idempotency-Key must be 1-255 characters', {
      errors: [{ path: 'Idempotency-Key', message: 'must be 1-255 characters' }],
    });
  const fingerprint = crypto
    .createHash('sha256')
    .update(`${request.method} ${request.path}\n${canonicalJson(request.body ?? null)}`)
    .digest();
  for (;;) {
    const ins = await tx.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status) VALUES ($1, $2, $3, 0)
       ON CONFLICT (tenant_id, key) DO NOTHING`,
      [tenantId, key, fingerprint],
    );
    if (ins.rowCount === 1) return undefined;
    const r = await tx.query<{
      fingerprint: Buffer;
      response_status: number;
      response_body: unknown;
      fresh: boolean;
    }>(
      `SELECT fingerprint, response_status, response_body,
              created_at > now() - make_interval(hours => $3) AS fresh
         FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
      [tenantId, key, IDEMPOTENCY_TTL_HOURS],
    );
    const row = r.rows[0];
    if (!row) continue; // deleted between the two statements: claim it again
    if (!row.fresh) {
      await tx.query('DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2', [tenantId, key]);
      continue;
    }
    if (!row.fingerprint.equals(fingerprint))
      throw new Problem(
        'idempotency_mismatch',
        'this Idempotency-Key was used for a different request (method, path or body)',
      );
    return { status: row.response_status, body: row.response_body };
  }
}

export async function storeIdempotentAnswer(
  tx: Tx,
  tenantId: string,
  key: string,
  a: StoredAnswer,
): Promise<void> {
  await tx.query(
    'UPDATE idempotency_keys SET response_status = $3, response_body = $4 WHERE tenant_id = $1 AND key = $2',
    [tenantId, key, a.status, JSON.stringify(a.body)],
  );
}
