/**
 * A real Temporal server (not the dev server) on this machine: built from its Go module, its schemas
 * made by its own sql tool on Postgres, configured from deploy/temporal/, with the namespace and our
 * search attributes registered. `startCluster` is what `npm run cluster`, `npm run test:cluster` and
 * the benchmarks call; two clusters (e.g. 4 and 16 history shards) can run side by side.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { stringify } from 'yaml';
import { SEARCH_ATTRIBUTES } from '../../src/workflows/search-attributes';

export const ROOT = path.resolve(__dirname, '..', '..');
export const DEPLOY_DIR = path.join(ROOT, 'deploy', 'temporal');
export const GO_BIN = path.join(ROOT, '.tools', 'go');
export const TEMPORAL_SERVER_MODULE = 'go.temporal.io/server';
export const TEMPORAL_SERVER_VERSION = 'v1.32.2';
export const UI_SERVER_MODULE = 'github.com/temporalio/ui-server/v2';
export const UI_SERVER_VERSION = 'v2.54.1';
/** The machine's Go (1.26) is too old for the server; the go command fetches this toolchain itself. */
export const GOTOOLCHAIN = 'go1.27.3';

export const SERVER_BIN = path.join(GO_BIN, 'server');
export const SQL_BIN = path.join(GO_BIN, 'sql');
/** ui-server's command is also called `server`: it gets its own folder. */
export const UI_BIN = path.join(GO_BIN, 'ui', 'server');

export type Role = 'frontend' | 'history' | 'matching' | 'worker';
export const ROLES: Role[] = ['frontend', 'history', 'matching', 'worker'];

export interface PgServer {
  host: string;
  port: number;
  user: string;
  password: string;
}

export interface ClusterOptions {
  /** History shards: fixed when the cluster's databases are created. */
  shards: number;
  /** `single`: one process with all four roles; `split`: one process per role. */
  layout: 'single' | 'split';
  /** The Postgres server that holds the cluster's two databases (its user needs CREATEDB). */
  pg: PgServer;
  /** Names the databases (`temporal_<name>`, `temporal_<name>_visibility`) and the data folder. Default `s<shards>`. */
  name?: string;
  /** The frontend's gRPC port; default: a free one. */
  port?: number;
  namespace?: string;
  /** Extra dynamic config entries (key → list of {value, constraints}), e.g. for a test namespace. */
  dynamicConfig?: Record<string, unknown[]>;
  /** Where its dynamic config and logs go; default .data/cluster/<name>. */
  dir?: string;
  /** Also start the Web UI (ui-server) on this port. */
  uiPort?: number;
  log?: (line: string) => void;
}

export interface Cluster {
  name: string;
  address: string;
  namespace: string;
  shards: number;
  layout: 'single' | 'split';
  uiUrl?: string;
  databases: [string, string];
  /** The server's processes by role (`all` in the single layout) and `ui`. */
  pids: Record<string, number>;
  processes: Record<string, ChildProcess>;
  dir: string;
  stop(): Promise<void>;
}

const say = (o: { log?: (l: string) => void }, line: string) =>
  (o.log ?? ((l: string) => process.stderr.write(`[cluster] ${l}\n`)))(line);

/**
 * A port free when chosen, picked at random in 20000-31999: below the kernel's ephemeral ports
 * (32768 and up), which every outgoing connection takes one of. A port the kernel hands out (listen on 0)
 * may be taken by a client's connection between choosing and binding it; one here is only taken by
 * another listener that chose the same number, which a random pick from 12,000 makes rare.
 */
export async function freePort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    if (await portFree(port)) return port;
  }
  throw new Error('no free port in 20000-31999 after 50 tries');
}

const goEnv = () => ({ ...process.env, GOTOOLCHAIN, GOFLAGS: process.env.GOFLAGS ?? '-buildvcs=false' });

function goInstall(pkg: string, gobin: string, log: (l: string) => void): void {
  const started = Date.now();
  log(`building ${pkg} into ${path.relative(ROOT, gobin)} (GOTOOLCHAIN=${GOTOOLCHAIN}) …`);
  fs.mkdirSync(gobin, { recursive: true });
  const r = spawnSync('go', ['install', '-v', pkg], {
    env: { ...goEnv(), GOBIN: gobin },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  if (r.error) throw new Error(`could not run go (is Go installed?): ${r.error.message}`);
  if (r.status !== 0) throw new Error(`go install ${pkg} failed (exit ${r.status})`);
  log(`built ${pkg} in ${Math.round((Date.now() - started) / 1000)} s`);
}

/**
 * Builds the server, its sql tool and (when asked) the Web UI server from their Go modules into
 * .tools/go when missing: about 5 minutes the first time on 2 cores (toolchain, modules, build cache),
 * seconds after that.
 */
export function ensureClusterBinaries(o: { ui?: boolean; log?: (l: string) => void } = {}): void {
  const log = (l: string) => say(o, l);
  const server = `${TEMPORAL_SERVER_MODULE}/cmd/server@${TEMPORAL_SERVER_VERSION}`;
  if (!fs.existsSync(SERVER_BIN)) goInstall(server, GO_BIN, log);
  if (!fs.existsSync(SQL_BIN))
    goInstall(`${TEMPORAL_SERVER_MODULE}/cmd/tools/sql@${TEMPORAL_SERVER_VERSION}`, GO_BIN, log);
  if (o.ui && !fs.existsSync(UI_BIN))
    goInstall(`${UI_SERVER_MODULE}/cmd/server@${UI_SERVER_VERSION}`, path.dirname(UI_BIN), log);
}

/** The server module's folder in the Go module cache (its schema/ is what the sql tool applies). */
export function serverModuleDir(): string {
  const r = spawnSync(
    'go',
    ['mod', 'download', '-json', `${TEMPORAL_SERVER_MODULE}@${TEMPORAL_SERVER_VERSION}`],
    {
      env: goEnv(),
      encoding: 'utf8',
    },
  );
  if (r.status !== 0) throw new Error(`go mod download ${TEMPORAL_SERVER_MODULE}: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { Dir: string }).Dir;
}

/** Runs deploy/temporal/setup-schema.sh (the same script docker-compose.yml runs). */
export function setupSchema(pg: PgServer, databases: [string, string], log: (l: string) => void): void {
  const schemaDir = path.join(serverModuleDir(), 'schema', 'postgresql', 'v12');
  const r = spawnSync('sh', [path.join(DEPLOY_DIR, 'setup-schema.sh')], {
    env: {
      ...process.env,
      SQL_TOOL: SQL_BIN,
      SCHEMA_DIR: schemaDir,
      POSTGRES_SEEDS: pg.host,
      DB_PORT: String(pg.port),
      POSTGRES_USER: pg.user,
      POSTGRES_PWD: pg.password,
      DBNAME: databases[0],
      VISIBILITY_DBNAME: databases[1],
    },
    encoding: 'utf8',
  });
  for (const l of r.stdout.split('\n')) if (l.startsWith('temporal schema:')) log(l);
  if (r.status !== 0) throw new Error(`temporal schema setup failed:\n${r.stdout}\n${r.stderr}`);
}

function waitExit(child: ChildProcess, ms: number): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), ms).unref();
  });
}

/** The last lines of a server log, JSON lines cut to their level, message and error. */
function tail(file: string, lines = 12): string {
  let text = '';
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return '';
  }
  return text
    .trimEnd()
    .split('\n')
    .slice(-lines)
    .map((l) => {
      try {
        const j = JSON.parse(l) as { level?: string; msg?: string; error?: string };
        return `${j.level}: ${j.msg}${j.error ? ` (${j.error})` : ''}`;
      } catch {
        return l;
      }
    })
    .join('\n');
}

const portFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });

/** Ports a cluster takes from its frontend port on: 9 for the roles, 4 for metrics listeners. */
export const PORT_BLOCK = 13;

/**
 * A block of free ports below 32768: the membership table stores ports as smallint, so the kernel's
 * ephemeral ports (32768 and up) fail there.
 */
export async function freePortBlock(from = 17233): Promise<number> {
  for (let base = from; base + PORT_BLOCK < 32768; base += 20) {
    let free = true;
    for (let p = base; p < base + PORT_BLOCK && free; p++) free = await portFree(p);
    if (free) return base;
  }
  throw new Error('no free block of ports below 32768');
}

/** gRPC status ALREADY_EXISTS. */
const alreadyExists = (err: unknown) => (err as { code?: number }).code === 6;

async function retry<T>(what: string, fn: () => Promise<T>, ms: number, failed: () => string | undefined) {
  const until = Date.now() + ms;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      const dead = failed();
      if (dead) throw new Error(`${what}: ${dead}`);
      if (Date.now() > until) throw new Error(`${what}: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, 300));
    }
  }
}

/** Creates the namespace and our search attributes when missing, then proves a start that uses them works. */
export async function registerNamespace(
  address: string,
  namespace: string,
  o: { failed?: () => string | undefined; log?: (l: string) => void; timeoutMs?: number } = {},
): Promise<void> {
  const failed = o.failed ?? (() => undefined);
  const timeoutMs = o.timeoutMs ?? 120_000;
  const connection = await retry(
    'temporal frontend',
    async () => {
      const c = await Connection.connect({ address, connectTimeout: 1000 });
      await c.workflowService.getSystemInfo({});
      return c;
    },
    timeoutMs,
    failed,
  );
  try {
    await retry(
      `namespace ${namespace}`,
      async () => {
        try {
          await connection.workflowService.registerNamespace({
            namespace,
            workflowExecutionRetentionPeriod: msToTs('3 days'),
          });
          say(o, `namespace ${namespace} created`);
        } catch (err) {
          if (!alreadyExists(err)) throw err;
        }
        await connection.workflowService.describeNamespace({ namespace });
      },
      timeoutMs,
      failed,
    );
    await retry(
      'search attributes',
      async () => {
        const have = await connection.operatorService.listSearchAttributes({ namespace });
        const missing = SEARCH_ATTRIBUTES.filter((a) => !(a.name in (have.customAttributes ?? {})));
        if (missing.length > 0) {
          // 2 = KEYWORD
          await connection.operatorService.addSearchAttributes({
            namespace,
            searchAttributes: Object.fromEntries(missing.map((a) => [a.name, 2])),
          });
          say(o, `search attributes ${missing.map((a) => a.name).join(', ')} registered`);
        }
      },
      timeoutMs,
      failed,
    );
    // Every role learns of namespace changes on its own refresh: wait until a start that carries the
    // attributes is accepted, so the first real start does not fail.
    const { Client } = await import('@temporalio/client');
    const client = new Client({ connection, namespace });
    await retry(
      'a start with the search attributes',
      async () => {
        const h = await client.workflow.start('a2aPushClusterProbe', {
          workflowId: `a2a-push-probe-${crypto.randomBytes(4).toString('hex')}`,
          taskQueue: 'a2a-push-probe',
          typedSearchAttributes: SEARCH_ATTRIBUTES.map((key) => ({ key, value: 'probe' })),
        });
        await h.terminate('cluster start probe');
      },
      timeoutMs,
      failed,
    );
  } finally {
    await connection.close();
  }
}

/**
 * Starts a Temporal cluster over `o.pg`: builds what is missing, creates and migrates its databases,
 * writes its dynamic config, starts the roles (one process or four), registers the namespace and
 * the search attributes, and starts the Web UI when `uiPort` is given.
 */
export async function startCluster(o: ClusterOptions): Promise<Cluster> {
  const log = (l: string) => say(o, l);
  const name = o.name ?? `s${o.shards}`;
  const namespace = o.namespace ?? 'default';
  const databases: [string, string] = [`temporal_${name}`, `temporal_${name}_visibility`];
  const dir = o.dir ?? path.join(ROOT, '.data', 'cluster', name);
  fs.mkdirSync(dir, { recursive: true });
  ensureClusterBinaries({ ui: o.uiPort !== undefined, log: o.log ?? log });
  setupSchema(o.pg, databases, log);

  // The shard count is stored in the databases at creation; a different one later fails at start.
  const shardFile = path.join(dir, 'shards');
  if (fs.existsSync(shardFile) && fs.readFileSync(shardFile, 'utf8').trim() !== String(o.shards))
    throw new Error(
      `cluster ${name} was created with ${fs.readFileSync(shardFile, 'utf8').trim()} history shards, not ${o.shards}: use another --name`,
    );
  fs.writeFileSync(shardFile, `${o.shards}\n`);

  const dynamicConfigFile = path.join(dir, 'dynamicconfig.yaml');
  fs.writeFileSync(
    dynamicConfigFile,
    fs.readFileSync(path.join(DEPLOY_DIR, 'dynamicconfig.yaml'), 'utf8') +
      (o.dynamicConfig ? `\n# added by startCluster\n${stringify(o.dynamicConfig)}` : ''),
  );

  const frontendPort = o.port ?? (await freePortBlock());
  for (let p = frontendPort; p < frontendPort + PORT_BLOCK; p++)
    if (!(await portFree(p)))
      throw new Error(
        `port ${p} (of the cluster's ${frontendPort}-${frontendPort + PORT_BLOCK - 1}) is in use`,
      );
  const port = (i: number) => String(frontendPort + i);
  const env: Record<string, string> = {
    POSTGRES_SEEDS: o.pg.host,
    DB_PORT: String(o.pg.port),
    POSTGRES_USER: o.pg.user,
    POSTGRES_PWD: o.pg.password,
    DBNAME: databases[0],
    VISIBILITY_DBNAME: databases[1],
    NUM_HISTORY_SHARDS: String(o.shards),
    BIND_ON_IP: '127.0.0.1',
    TEMPORAL_BROADCAST_ADDRESS: '127.0.0.1',
    DYNAMIC_CONFIG_FILE_PATH: dynamicConfigFile,
    FRONTEND_GRPC_PORT: port(0),
    FRONTEND_MEMBERSHIP_PORT: port(1),
    FRONTEND_HTTP_PORT: port(2),
    HISTORY_GRPC_PORT: port(3),
    HISTORY_MEMBERSHIP_PORT: port(4),
    MATCHING_GRPC_PORT: port(5),
    MATCHING_MEMBERSHIP_PORT: port(6),
    WORKER_GRPC_PORT: port(7),
    WORKER_MEMBERSHIP_PORT: port(8),
  };
  // What the template was given, for whoever looks at a running cluster (password left out).
  fs.writeFileSync(
    path.join(dir, 'cluster.env'),
    Object.entries({ ...env, POSTGRES_PWD: '********' })
      .map(([k, v]) => `${k}=${v}`)
      .join('\n') + '\n',
  );

  const groups: Array<{ label: string; roles: Role[] }> =
    o.layout === 'single' ? [{ label: 'all', roles: ROLES }] : ROLES.map((r) => ({ label: r, roles: [r] }));
  const processes: Record<string, ChildProcess> = {};
  const logs: Record<string, string> = {};
  const exited = () => {
    for (const [label, p] of Object.entries(processes))
      if (p.exitCode !== null || p.signalCode !== null)
        return `temporal ${label} exited (${p.exitCode ?? p.signalCode}); its log:\n${tail(logs[label]!)}`;
    return undefined;
  };
  const stop = async () => {
    // Frontend last, so the other roles can still reach it while they drain.
    const order = Object.keys(processes).sort((a, b) => Number(a === 'frontend') - Number(b === 'frontend'));
    for (const label of order) await waitExit(processes[label]!, 15_000);
  };
  const started = Date.now();
  try {
    for (const [i, g] of groups.entries()) {
      const logFile = path.join(dir, `temporal-${g.label}.log`);
      logs[g.label] = logFile;
      const out = fs.openSync(logFile, 'a');
      const args = [
        '--config-file',
        path.join(DEPLOY_DIR, 'config.template.yaml'),
        '--allow-no-auth',
        'start',
      ];
      for (const r of g.roles) args.push('--service', r);
      processes[g.label] = spawn(SERVER_BIN, args, {
        env: { ...process.env, ...env, PROMETHEUS_ENDPOINT: `127.0.0.1:${port(9 + i)}` },
        stdio: ['ignore', out, out],
      });
      fs.closeSync(out);
      // Each process writes the cluster's metadata (the frontend address) at start when it changed;
      // several at once conflict ("SaveClusterMetadata encountered version mismatch"). The first
      // one has written it once its membership port listens.
      if (i === 0 && groups.length > 1)
        await retry(
          `temporal ${g.label}`,
          async () => {
            if (await portFree(frontendPort + 1)) throw new Error('membership port not listening yet');
          },
          60_000,
          exited,
        );
    }
    const address = `127.0.0.1:${frontendPort}`;
    await registerNamespace(address, namespace, { failed: exited, log });
    log(
      `temporal ${TEMPORAL_SERVER_VERSION} (${o.layout}, ${o.shards} history shards) ready at ${address} in ${((Date.now() - started) / 1000).toFixed(1)} s; logs in ${path.relative(ROOT, dir)}`,
    );

    let uiUrl: string | undefined;
    if (o.uiPort !== undefined) {
      const out = fs.openSync(path.join(dir, 'ui.log'), 'a');
      processes.ui = spawn(UI_BIN, ['--root', DEPLOY_DIR, '--config', 'ui', '--env', 'cluster', 'start'], {
        env: {
          ...process.env,
          TEMPORAL_ADDRESS: address,
          TEMPORAL_UI_PORT: String(o.uiPort),
          TEMPORAL_DEFAULT_NAMESPACE: namespace,
        },
        stdio: ['ignore', out, out],
      });
      logs.ui = path.join(dir, 'ui.log');
      fs.closeSync(out);
      uiUrl = `http://127.0.0.1:${o.uiPort}`;
      await retry(
        'temporal web ui',
        () =>
          new Promise<void>((resolve, reject) => {
            const s = net.connect(o.uiPort!, '127.0.0.1');
            s.once('connect', () => (s.destroy(), resolve()));
            s.once('error', reject);
          }),
        30_000,
        exited,
      );
    }
    return {
      name,
      address,
      namespace,
      shards: o.shards,
      layout: o.layout,
      ...(uiUrl ? { uiUrl } : {}),
      databases,
      pids: Object.fromEntries(Object.entries(processes).map(([k, p]) => [k, p.pid!])),
      processes,
      dir,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
