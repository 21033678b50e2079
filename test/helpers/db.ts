import crypto from 'node:crypto';
import { Client } from 'pg';
import { createPool, migrate, type Db } from '../../src/db/pool';

export interface TestDb {
  db: Db;
  url: string;
  name: string;
  drop(): Promise<void>;
}

/** A fresh, migrated database of the run's Postgres for one test file. */
export async function createTestDb(): Promise<TestDb> {
  const admin = process.env.TEST_PG_ADMIN_URL;
  if (!admin) throw new Error('TEST_PG_ADMIN_URL is not set: run the tests through jest (global setup)');
  const name = `t_${crypto.randomBytes(6).toString('hex')}`;
  const c = new Client({ connectionString: admin });
  await c.connect();
  await c.query(`CREATE DATABASE ${name}`);
  await c.end();
  const url = admin.replace(/\/postgres$/, `/${name}`);
  const db = createPool(url, 20);
  await migrate(db);
  return {
    db,
    url,
    name,
    async drop() {
      await db.end();
      const d = new Client({ connectionString: admin });
      await d.connect();
      await d.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await d.end();
    },
  };
}
