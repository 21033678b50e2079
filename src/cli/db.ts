import { createPool, migrate, type Db } from '../db/pool';
import { EMBEDDED_DB, EMBEDDED_PG_DIR, EMBEDDED_PG_PORT } from '../embedded/data';
import { isPortOpen, startEmbeddedPostgres, pgUrl } from '../embedded/postgres';

/**
 * The database a command works on: DATABASE_URL, or the embedded one under .data/ — used as it is when
 * `npm start` runs, started for the command otherwise.
 */
export async function commandDb(): Promise<{ db: Db; close(): Promise<void> }> {
  if (process.env.DATABASE_URL) {
    const db = createPool(process.env.DATABASE_URL, 2);
    await migrate(db);
    return { db, close: () => db.end() };
  }
  let stop: (() => Promise<void>) | undefined;
  if (!(await isPortOpen(EMBEDDED_PG_PORT))) {
    const pg = await startEmbeddedPostgres({
      dir: EMBEDDED_PG_DIR,
      port: EMBEDDED_PG_PORT,
      databases: [EMBEDDED_DB],
    });
    stop = () => pg.stop();
  }
  const db = createPool(pgUrl(EMBEDDED_PG_PORT, EMBEDDED_DB), 2);
  await migrate(db);
  return {
    db,
    async close() {
      await db.end();
      await stop?.();
    },
  };
}
