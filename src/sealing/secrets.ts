import type { Db, Tx } from '../db/pool';
import { Keyring } from './keyring';

export type SecretPurpose = 'push_credential' | 'agent_token';

// The row's purpose and tenant are bound into the ciphertext, so a sealed value cannot be moved to another use.
const aadOf = (tenantId: string, purpose: SecretPurpose) => `a2a-push:v1:${tenantId}:${purpose}`;

export async function sealSecret(
  tx: Tx | Db,
  keyring: Keyring,
  tenantId: string,
  purpose: SecretPurpose,
  plaintext: string,
): Promise<string> {
  const s = keyring.seal(plaintext, aadOf(tenantId, purpose));
  const r = await tx.query<{ id: string }>(
    `INSERT INTO sealed_secrets (tenant_id, purpose, key_id, iv, ciphertext, tag) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
    [tenantId, purpose, s.keyId, s.iv, s.ciphertext, s.tag],
  );
  return r.rows[0]!.id;
}

export interface SecretRow {
  tenant_id: string;
  purpose: SecretPurpose;
  key_id: string;
  iv: Buffer;
  ciphertext: Buffer;
  tag: Buffer;
}

/** Only the activity that makes the call unseals. */
export async function unsealSecret(db: Tx | Db, keyring: Keyring, id: string): Promise<string> {
  const r = await db.query<SecretRow>(
    'SELECT tenant_id, purpose, key_id, iv, ciphertext, tag FROM sealed_secrets WHERE id = $1',
    [id],
  );
  const row = r.rows[0];
  if (!row) throw new Error(`sealed secret ${id} is missing`);
  return unsealRow(keyring, row);
}

/** Unseals a row read with a caller's own query (the delivery activity reads it with the job). */
export const unsealRow = (keyring: Keyring, row: SecretRow): string =>
  keyring.unseal(
    { keyId: row.key_id, iv: row.iv, ciphertext: row.ciphertext, tag: row.tag },
    aadOf(row.tenant_id, row.purpose),
  );

/** Moves every sealed value to the active key. Returns how many rows were rewritten. */
export async function resealAll(db: Db, keyring: Keyring): Promise<number> {
  let moved = 0;
  for (;;) {
    const r = await db.query<SecretRow & { id: string }>(
      `SELECT id, tenant_id, purpose, key_id, iv, ciphertext, tag FROM sealed_secrets
        WHERE key_id <> $1 ORDER BY id LIMIT 500`,
      [keyring.activeKeyId],
    );
    if (r.rows.length === 0) return moved;
    for (const row of r.rows) {
      const aad = aadOf(row.tenant_id, row.purpose);
      const plain = keyring.unseal(
        { keyId: row.key_id, iv: row.iv, ciphertext: row.ciphertext, tag: row.tag },
        aad,
      );
      const s = keyring.seal(plain, aad);
      const u = await db.query(
        'UPDATE sealed_secrets SET key_id = $2, iv = $3, ciphertext = $4, tag = $5 WHERE id = $1 AND key_id = $6',
        [row.id, s.keyId, s.iv, s.ciphertext, s.tag, row.key_id],
      );
      moved += u.rowCount ?? 0;
    }
  }
}
