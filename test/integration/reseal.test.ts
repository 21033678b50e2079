import { createApiKey } from '../../src/db/apikeys';
import { Keyring } from '../../src/sealing/keyring';
import { resealAll, sealSecret, unsealSecret } from '../../src/sealing/secrets';
import { createTestDb, type TestDb } from '../helpers/db';

let tdb: TestDb;
beforeAll(async () => {
  tdb = await createTestDb();
  await createApiKey(tdb.db, 't1');
  await createApiKey(tdb.db, 't2');
});
afterAll(async () => {
  await tdb.drop();
});

it('reseal moves every sealed value to the active key; values stay readable and bound to their tenant', async () => {
  const old = Keyring.generateEntry('old');
  const next = Keyring.generateEntry('new');
  const before = Keyring.parse(old);
  const ids = [
    await sealSecret(tdb.db, before, 't1', 'push_credential', 'cred-1'),
    await sealSecret(tdb.db, before, 't2', 'agent_token', 'token-2'),
  ];
  const ring = Keyring.parse(`${old},${next}`, 'new');
  expect(await resealAll(tdb.db, ring)).toBe(2);
  const rows = await tdb.db.query('SELECT key_id FROM sealed_secrets ORDER BY id');
  expect(rows.rows.map((r) => r.key_id)).toEqual(['new', 'new']);
  // The old key can go: the new one alone reads everything.
  const only = Keyring.parse(next);
  expect(await unsealSecret(tdb.db, only, ids[0]!)).toBe('cred-1');
  expect(await unsealSecret(tdb.db, only, ids[1]!)).toBe('token-2');
  expect(await resealAll(tdb.db, only)).toBe(0);
  // A sealed value moved to another tenant's row does not open.
  await tdb.db.query(`UPDATE sealed_secrets SET tenant_id = 't2' WHERE id = $1`, [ids[0]]);
  await expect(unsealSecret(tdb.db, only, ids[0]!)).rejects.toThrow();
});
