/** The Postgres a cluster runs over: DATABASE_URL's server, or an embedded one of its own. */
import path from 'node:path';
import { ensureDatabase, startEmbeddedPostgres, type EmbeddedPg } from '../../src/embedded/postgres';
import type { PgServer } from './cluster';
import { ROOT } from './cluster';

/** The cluster's embedded Postgres: its own folder and port, so it never meets `npm start`'s. */
export const CLUSTER_PG_DIR = path.join(ROOT, '.data', 'cluster', 'pg');
export const CLUSTER_PG_PORT = 54339;
export const SERVICE_DB = 'a2a_push';

export interface ClusterPg {
  server: PgServer;
  /** The service's own database (DATABASE_URL, or `a2a_push` on the embedded server). */
  databaseUrl: string;
  embedded?: EmbeddedPg;
  stop(): Promise<void>;
}

export function pgServerFromUrl(url: string): PgServer {
  const u = new URL(url);
  return {
    host: u.hostname,
    port: Number(u.port || 5432),
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
  };
}

export async function clusterPostgres(o: {
  databaseUrl?: string;
  dir?: string;
  port?: number;
  log?: (l: string) => void;
}): Promise<ClusterPg> {
  if (o.databaseUrl) {
    return {
      server: pgServerFromUrl(o.databaseUrl),
      databaseUrl: o.databaseUrl,
      stop: async () => undefined,
    };
  }
  const port = o.port ?? CLUSTER_PG_PORT;
  const pg = await startEmbeddedPostgres({
    dir: o.dir ?? CLUSTER_PG_DIR,
    port,
    databases: [SERVICE_DB],
    // Two clusters of four roles each keep up to ~120 connections apiece, beside the service's pools.
    maxConnections: 600,
    ...(o.log ? { log: o.log } : {}),
  });
  const url = pg.url(SERVICE_DB);
  await ensureDatabase(pg.url('postgres'), SERVICE_DB);
  return { server: pgServerFromUrl(url), databaseUrl: url, embedded: pg, stop: () => pg.stop() };
}
