import { spawnSync } from 'node:child_process';
import path from 'node:path';
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

it('`npm run reseal` with DATABASE_URL: refused without SEAL_ACTIVE_KEY (nothing moved), then moves every value to the key it names', async () => {
  const own = await createTestDb();
  try {
    await createApiKey(own.db, 't1');
    const old = Keyring.generateEntry('old');
    const next = Keyring.generateEntry('next');
    await sealSecret(own.db, Keyring.parse(old), 't1', 'push_credential', 'cred-cli');
    const reseal = (active: string) =>
      spawnSync(
        process.execPath,
        ['-r', 'ts-node/register/transpile-only', path.join('src', 'cli', 'reseal.ts')],
        {
          cwd: path.resolve(__dirname, '..', '..'),
          env: {
            ...process.env,
            DATABASE_URL: own.url,
            SEAL_KEYS: `${old},${next}`,
            SEAL_ACTIVE_KEY: active,
          },
          encoding: 'utf8',
        },
      );
    const keyIds = async () =>
      (await own.db.query('SELECT key_id FROM sealed_secrets')).rows.map((r) => r.key_id);
    // Two keys, none named: the command does not guess the last one.
    const refused = reseal('');
    expect([refused.status, refused.stderr.trim()]).toEqual([
      1,
      'SEAL_ACTIVE_KEY is required when SEAL_KEYS is set',
    ]);
    expect(await keyIds()).toEqual(['old']);
    const done = reseal('next');
    expect([done.status, done.stdout.trim()]).toEqual([0, 'resealed 1 value(s) under key "next"']);
    expect(await keyIds()).toEqual(['next']);
  } finally {
    await own.drop();
  }
});
