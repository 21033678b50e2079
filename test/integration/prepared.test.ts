import { createPool, preparedStatement, type Db } from '../../src/db/pool';
import { createApiKey, findApiKey } from '../../src/db/apikeys';
import { createTestDb, type TestDb } from '../helpers/db';

let tdb: TestDb;
/** One connection: every call below runs on the backend whose prepared statements the test reads. */
let one: Db;

beforeAll(async () => {
  tdb = await createTestDb();
  one = createPool(tdb.url, 1);
});
afterAll(async () => {
  await one.end();
  await tdb.drop();
});

const preparedOn = async (db: Db, name: string) =>
  (
    await db.query<{ generic_plans: string; custom_plans: string }>(
      'SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1',
      [name],
    )
  ).rows[0];

it('a name stands for one text: the same again is fine, another text under it is refused', () => {
  const a = preparedStatement<[number]>('test.one', 'SELECT $1::int AS v');
  expect(preparedStatement<[number]>('test.one', 'SELECT $1::int AS v')([1])).toEqual(a([1]));
  expect(() => preparedStatement<[number]>('test.one', 'SELECT $1::int + 1 AS v')).toThrow(
    'prepared statement test.one has two texts',
  );
});

it('the api key lookup is prepared once per connection and runs on one generic plan after five calls', async () => {
  const { key, tenantId } = await createApiKey(tdb.db, 'tenant-prepared');
  expect(await preparedOn(one, 'apikeys.find')).toBeUndefined();
  for (let i = 0; i < 8; i++) expect(await findApiKey(one, key)).toMatchObject({ tenantId });
  expect(await findApiKey(one, 'not-a-key')).toBeUndefined();
  const p = await preparedOn(one, 'apikeys.find');
  expect(Number(p!.custom_plans)).toBe(5);
  expect(Number(p!.generic_plans)).toBe(4);
});

it('a migration that leaves its columns alone (a new column, an index) does not break a prepared statement', async () => {
  const { key, tenantId } = await createApiKey(tdb.db, 'tenant-migrated');
  expect(await findApiKey(one, key)).toMatchObject({ tenantId });
  await tdb.db.query('ALTER TABLE api_keys ADD COLUMN note text');
  await tdb.db.query('CREATE INDEX api_keys_note ON api_keys (note)');
  expect(await findApiKey(one, key)).toMatchObject({ tenantId });
  await tdb.db.query('DROP INDEX api_keys_note');
  await tdb.db.query('ALTER TABLE api_keys DROP COLUMN note');
  expect(await findApiKey(one, key)).toMatchObject({ tenantId });
});

it('a migration that changes a prepared result column fails one call per connection: the pool drops that connection, the next prepares anew', async () => {
  await tdb.db.query('CREATE TABLE prepared_probe (id integer PRIMARY KEY, v integer)');
  await tdb.db.query('INSERT INTO prepared_probe VALUES (1, 7)');
  const probe = preparedStatement<[number]>('test.probe', 'SELECT v FROM prepared_probe WHERE id = $1');
  expect((await one.query(probe([1]))).rows).toEqual([{ v: 7 }]);
  await tdb.db.query('ALTER TABLE prepared_probe ALTER COLUMN v TYPE bigint');
  await expect(one.query(probe([1]))).rejects.toMatchObject({
    code: '0A000',
    message: 'cached plan must not change result type',
  });
  // bigint comes back as a string (src/db/pool.ts).
  expect((await one.query(probe([1]))).rows).toEqual([{ v: '7' }]);
  expect(await preparedOn(one, 'test.probe')).toBeDefined();
});

it('the event write plans its statements once per connection: its function keeps force_generic_plan (migration 019)', async () => {
  const r = await tdb.db.query<{ proconfig: string[] | null }>(
    "SELECT proconfig FROM pg_proc WHERE proname = 'outbox_write_event'",
  );
  expect(r.rows).toEqual([{ proconfig: ['plan_cache_mode=force_generic_plan'] }]);
});
