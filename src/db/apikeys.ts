import crypto from 'node:crypto';
import type { Db } from './pool';
import { inTx, preparedStatement } from './pool';
import { audit } from './audit';

export const hashApiKey = (key: string) => crypto.createHash('sha256').update(key, 'utf8').digest();

export interface CreatedKey {
  id: string;
  tenantId: string;
  key: string;
}

/** Creates the tenant when missing and a new key for it; the key is returned once and stored hashed. */
export async function createApiKey(
  db: Db,
  tenantId: string,
  key?: string,
  actor = 'system',
): Promise<CreatedKey> {
  const secret = key ?? `a2ap_${crypto.randomBytes(32).toString('base64url')}`;
  const id = `key_${crypto.randomBytes(6).toString('hex')}`;
  await inTx(db, async (tx) => {
    await tx.query('INSERT INTO tenants (id) VALUES ($1) ON CONFLICT DO NOTHING', [tenantId]);
    await tx.query('INSERT INTO api_keys (id, tenant_id, key_hash) VALUES ($1, $2, $3)', [
      id,
      tenantId,
      hashApiKey(secret),
    ]);
    await audit(tx, {
      tenantId,
      actor,
      action: 'api_key.created',
      objectType: 'api_key',
      objectId: id,
      after: 'active',
    });
  });
  return { id, tenantId, key: secret };
}

export async function revokeApiKey(db: Db, id: string, actor = 'system'): Promise<boolean> {
  return inTx(db, async (tx) => {
    const r = await tx.query<{ tenant_id: string }>(
      'UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL RETURNING tenant_id',
      [id],
    );
    const row = r.rows[0];
    if (!row) return false;
    await audit(tx, {
      tenantId: row.tenant_id,
      actor,
      action: 'api_key.revoked',
      objectType: 'api_key',
      objectId: id,
      before: 'active',
      after: 'revoked',
    });
    return true;
  });
}

const readApiKey = preparedStatement<[Buffer]>(
  'apikeys.find',
  'SELECT id, tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL',
);

export async function findApiKey(db: Db, key: string): Promise<{ id: string; tenantId: string } | undefined> {
  // The key is 256 random bits: looking it up by its hash leaks nothing a timing attack could use.
  const r = await db.query<{ id: string; tenant_id: string }>(readApiKey([hashApiKey(key)]));
  const row = r.rows[0];
  return row ? { id: row.id, tenantId: row.tenant_id } : undefined;
}

/**
 * Tenant `default` with a first key when no key exists at all: BOOTSTRAP_API_KEY's, or (embedded start)
 * a generated one, returned so it can be shown once.
 */
export async function bootstrapApiKey(db: Db, key?: string): Promise<CreatedKey | undefined> {
  const r = await db.query('SELECT 1 FROM api_keys LIMIT 1');
  if (r.rowCount) return undefined;
  return createApiKey(db, 'default', key);
}
