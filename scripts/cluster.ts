/**
 * `npm run cluster`: the service on a real Temporal server over Postgres, on this machine.
 *
 *   npm run cluster                          single layout: one server process with all four roles, 1 worker
 *   npm run cluster -- --layout split        frontend, history, matching, worker as 4 processes; 2 of our workers
 *   options: --shards N (4) --workers N --name NAME (s<shards>) --port P (7233) --ui-port P (8233) --no-ui
 *
 * Builds the server, its sql tool and the Web UI server into .tools/go when missing, uses
 * DATABASE_URL's Postgres or an embedded one (.data/cluster/pg), creates and migrates
 * temporal_<name> and temporal_<name>_visibility there, starts the server from
 * deploy/temporal/config.template.yaml, registers the namespace and search attributes, then starts
 * api, inbox and worker(s) as separate processes. Ctrl-C stops everything.
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadSettings } from '../src/config';
import { bootstrapApiKey } from '../src/db/apikeys';
import { createPool, migrate } from '../src/db/pool';
import { sealKeysOrKeyFile } from '../src/embedded/data';
import { isPortOpen } from '../src/embedded/postgres';
import { ensureClusterBinaries, startCluster, type Cluster } from './cluster/cluster';
import { clusterPostgres, type ClusterPg } from './cluster/postgres';
import { startServiceProcesses, type ServiceProcesses } from './cluster/services';

const log = (l: string) => process.stderr.write(`[cluster] ${l}\n`);

let pg: ClusterPg | undefined;
let cluster: Cluster | undefined;
let services: ServiceProcesses | undefined;
let stopping = false;
async function stopAll(code: number) {
  if (stopping) return;
  stopping = true;
  log('stopping…');
  await services?.stop().catch(() => undefined);
  await cluster?.stop().catch(() => undefined);
  await pg?.stop().catch(() => undefined);
  process.exit(code);
}

async function main() {
  const { values } = parseArgs({
    options: {
      layout: { type: 'string', default: 'single' },
      shards: { type: 'string', default: '4' },
      workers: { type: 'string' },
      name: { type: 'string' },
      port: { type: 'string', default: '7233' },
      'ui-port': { type: 'string', default: '8233' },
      'no-ui': { type: 'boolean', default: false },
      'build-only': { type: 'boolean', default: false },
    },
  });
  const layout = values.layout;
  if (layout !== 'single' && layout !== 'split') throw new Error('--layout is single or split');
  const shards = Number(values.shards);
  if (!Number.isInteger(shards) || shards < 1) throw new Error('--shards is a positive integer');
  const workers = Number(values.workers ?? (layout === 'split' ? 2 : 1));
  const ui = !values['no-ui'];
  if (values['build-only']) {
    ensureClusterBinaries({ ui, log });
    return;
  }
  const settings = loadSettings();
  const uiPort = Number(values['ui-port']);
  const port = Number(values.port);
  for (const [what, p] of [['--port', port], ...(ui ? [['--ui-port', uiPort] as const] : [])] as const)
    if (await isPortOpen(p))
      throw new Error(`${what} ${p} is in use (npm start's dev server?): pick another`);

  process.on('SIGINT', () => void stopAll(0));
  process.on('SIGTERM', () => void stopAll(0));
  // Never leave a server process behind, whatever way this process ends.
  process.once('exit', () => {
    for (const p of [
      ...Object.values(cluster?.processes ?? {}),
      ...(services?.processes ?? []).map((s) => s.process),
    ])
      if (p.exitCode === null) p.kill('SIGKILL');
  });

  const started = Date.now();
  pg = await clusterPostgres({ ...(settings.DATABASE_URL ? { databaseUrl: settings.DATABASE_URL } : {}) });
  cluster = await startCluster({
    shards,
    layout,
    pg: pg.server,
    port,
    namespace: settings.TEMPORAL_NAMESPACE,
    ...(values.name ? { name: values.name } : {}),
    ...(ui ? { uiPort } : {}),
    log,
  });

  // As `npm start`: SEAL_KEYS with SEAL_ACTIVE_KEY, or the key file under .data/.
  const seal = sealKeysOrKeyFile(process.env);
  const db = createPool(pg.databaseUrl, 2);
  await migrate(db);
  const created = await bootstrapApiKey(db, settings.BOOTSTRAP_API_KEY);
  await db.end();

  const env: Record<string, string> = {
    DATABASE_URL: pg.databaseUrl,
    TEMPORAL_ADDRESS: cluster.address,
    TEMPORAL_NAMESPACE: cluster.namespace,
    SEAL_KEYS: seal.keys,
    SEAL_ACTIVE_KEY: seal.active,
  };
  services = await startServiceProcesses({
    env,
    workers,
    ports: { api: settings.API_PORT, inbox: settings.INBOX_PORT, worker: settings.WORKER_PORT },
    logDir: path.join(cluster.dir, 'services'),
    log,
  });
  const firstKey = created && !settings.BOOTSTRAP_API_KEY ? created.key : undefined;
  const lines = [
    '',
    `a2a-push is running on a real Temporal server (${layout} layout, ${shards} history shards) in ${Math.round((Date.now() - started) / 1000)} s — Ctrl-C stops everything`,
    `  API            ${services.apiUrl}/v1`,
    `  inbox          ${services.inboxUrl}/a2a/push/{registrationId}`,
    ...services.processes
      .filter((p) => p.kind === 'worker')
      .map(
        (p) =>
          `  ${p.label.padEnd(15)}http://127.0.0.1:${p.port}/healthz   (task queue ${settings.TASK_QUEUE})`,
      ),
    `  Temporal       ${cluster.address}  namespace ${cluster.namespace}  (pids ${Object.entries(cluster.pids)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')})`,
    `  Temporal UI    ${cluster.uiUrl ?? '(--no-ui)'}`,
    `  Postgres       ${pg.embedded ? `embedded on 127.0.0.1:${pg.server.port}` : 'DATABASE_URL'}: ${cluster.databases.join(', ')}, a2a push data in ${new URL(pg.databaseUrl).pathname.slice(1)}`,
    `  logs           ${path.relative(process.cwd(), cluster.dir)}/`,
    firstKey
      ? `  API key        ${firstKey}   (tenant "default"; shown once — keep it)`
      : '  API key        use your key; create another with: npm run apikey -- create --tenant NAME (with this DATABASE_URL)',
    '',
  ];
  process.stdout.write(lines.join('\n') + '\n');
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  void stopAll(1);
});
