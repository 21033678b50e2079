import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { ensureDatabase, startEmbeddedPostgres, type EmbeddedPg } from '../../src/embedded/postgres';
import { startDevServer, type DevServer } from '../../src/embedded/temporal';
import { Keyring } from '../../src/sealing/keyring';
import type { BenchContext, BenchTemporal } from './context';
import type { BenchReceiver } from './receiver';
import { freePort, sleep, waitUntil } from './util';

export const ROOT = path.resolve(__dirname, '..', '..');

const scratchDirs = new Set<string>();

/** A scratch folder for one benchmark run (Postgres data, dev server files, logs), removed at exit. */
export function scratchDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-bench-'));
  // One exit listener for all of them (a full run makes more than Node's 10 before it warns).
  if (scratchDirs.size === 0)
    process.once('exit', () => {
      if (!process.env.BENCH_KEEP)
        for (const d of scratchDirs) fs.rmSync(d, { recursive: true, force: true });
    });
  scratchDirs.add(dir);
  return dir;
}

/** Embedded Postgres on a free port with its own data dir (fsync on, as in production). */
export async function startBenchPostgres(dir: string): Promise<EmbeddedPg> {
  return startEmbeddedPostgres({ dir: path.join(dir, 'pg'), port: await freePort() });
}

let dbCount = 0;
export async function freshDatabase(pg: EmbeddedPg, prefix = 'bench'): Promise<string> {
  const name = `${prefix}_${process.pid}_${++dbCount}`;
  await ensureDatabase(pg.url('postgres'), name);
  return pg.url(name);
}

export type StoreMode = 'sqlite-defaults' | 'wal' | 'memory';
export const STORE_LABEL: Record<StoreMode, string> = {
  'sqlite-defaults': 'SQLite defaults',
  wal: 'WAL + synchronous=normal',
  memory: 'in memory',
};

/**
 * The Temporal dev server with a given store; `dbFile` lets a crash test restart on the same file;
 * `dynamicConfig` values as `key=value` (e.g. `matching.enableFairness=true`).
 */
export async function startBenchTemporal(
  dir: string,
  mode: StoreMode,
  dbFile = path.join(dir, `temporal-${mode}-${Date.now()}.db`),
  port?: number,
  dynamicConfig?: string[],
): Promise<DevServer & { pid: number; dbFile?: string }> {
  const s = await startDevServer({
    port: port ?? (await freePort()),
    ...(mode === 'memory' ? {} : { dbFile, sqliteDefaults: mode === 'sqlite-defaults' }),
    ...(dynamicConfig ? { dynamicConfig } : {}),
    log: () => undefined,
  });
  return { ...s, pid: s.process.pid!, ...(mode === 'memory' ? {} : { dbFile }) };
}

export const BENCH_API_KEY = 'a2ap_bench_key_0123456789abcdef';

export interface ServiceProc {
  kind: 'api' | 'inbox' | 'worker' | 'api,worker';
  pid: number;
  url: string;
  child: ChildProcess;
}

export interface Services {
  api: ServiceProc;
  inbox: ServiceProc;
  workers: ServiceProc[];
  apiKey: string;
  stop(): Promise<void>;
}

export type DeliveryOrder = 'per_config' | 'none';

/**
 * The DELIVERY_ORDER the service processes get unless a benchmark sets its own: the service's default
 * (per_config), or `BENCH_DELIVERY_ORDER` to run the whole suite under another. It is always passed
 * explicitly, so a DELIVERY_ORDER in the shell running the bench does not leak into the processes.
 */
export function defaultDeliveryOrder(): DeliveryOrder {
  const v = process.env.BENCH_DELIVERY_ORDER ?? 'per_config';
  if (v !== 'per_config' && v !== 'none')
    throw new Error(`BENCH_DELIVERY_ORDER: per_config or none, not ${v}`);
  return v;
}

/**
 * The delivery workflow type every delivery starts as (the lean one): kept in the results as earlier
 * runs, which could choose, kept it.
 */
export function benchDeliveryWorkflow(): 'lean' {
  return 'lean';
}

/** DELIVERY_ORDER of every set of service processes started since the last `takeDeliveryOrders()`. */
const ordersStarted: string[] = [];

/**
 * The DELIVERY_ORDER values the service processes started since the last call were given, distinct, in
 * the order first started (empty: no service process started); the runner reports them per benchmark.
 */
export function takeDeliveryOrders(): string[] {
  const seen = [...new Set(ordersStarted)];
  ordersStarted.length = 0;
  return seen;
}

/**
 * How the service processes are laid out (issue 21): `combined` (the default since session 16, as
 * `npm start` and docker-compose's api service run it), the api and the first worker in one process
 * (`main.ts api,worker`), sharing one relay that starts workflows eagerly on that worker's connection,
 * further workers and the inbox apart; or `split`, one process per role
 * (`main.ts api|inbox|worker`).
 * `BENCH_LAYOUT` picks it for the whole suite.
 */
export type Layout = 'split' | 'combined';
export function benchLayout(): Layout {
  const v = process.env.BENCH_LAYOUT ?? 'combined';
  if (v !== 'split' && v !== 'combined') throw new Error(`BENCH_LAYOUT: split or combined, not ${v}`);
  return v;
}

/** Short retries for the failure benchmark (and harmless for the others, where nothing fails). */
export const SHORT_RETRIES = { RETRY_INITIAL: '500ms', RETRY_FACTOR: '2', RETRY_MAX: '4s' };

function spawnService(kind: ServiceProc['kind'], env: Record<string, string>, logFile: string): ChildProcess {
  const out = fs.openSync(logFile, 'a');
  const flags = (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean);
  return spawn(
    process.execPath,
    [...flags, '-r', 'ts-node/register/transpile-only', path.join(ROOT, 'src', 'main.ts'), kind],
    {
      cwd: ROOT,
      env: { ...process.env, ...env, TS_NODE_PROJECT: path.join(ROOT, 'tsconfig.json') },
      stdio: ['ignore', out, out],
    },
  );
}

/** api and inbox: /healthz (they listen once migrated; /readyz also needs Temporal, which a benchmark may keep away). */
async function ready(url: string, child: ChildProcess, what: string, logFile: string, probe = '/readyz') {
  await waitUntil(
    `${what} /readyz`,
    async () => {
      if (child.exitCode !== null)
        throw new Error(
          `${what} exited with ${child.exitCode}; log:\n${fs.readFileSync(logFile, 'utf8').slice(-2000)}`,
        );
      try {
        const r = await request(`${url}${probe}`);
        await r.body.dump();
        return r.statusCode === 200;
      } catch {
        return false;
      }
    },
    120_000,
  );
}

const stopChild = (c: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (c.exitCode !== null || c.signalCode !== null) return resolve();
    c.once('exit', () => resolve());
    c.kill('SIGTERM');
    setTimeout(() => c.kill('SIGKILL'), 25_000).unref();
  });

/**
 * The service as production runs it: api, inbox and worker(s) each in its own Node process
 * (`src/main.ts api|inbox|worker`), so none shares an event loop with the load generator.
 */
export async function startServices(o: {
  dir: string;
  databaseUrl: string;
  temporalAddress: string;
  namespace?: string;
  caFile: string;
  workers?: number;
  /** Extra settings for every process (retry plan, bounds, DELIVERY_ORDER: else defaultDeliveryOrder()). */
  env?: Record<string, string>;
  /** Which processes to start (all by default). */
  start?: { inbox?: boolean; workers?: boolean };
  /** Default: benchLayout(). `combined` needs workers. */
  layout?: Layout;
}): Promise<Services> {
  const combined = (o.layout ?? benchLayout()) === 'combined' && o.start?.workers !== false;
  const [apiPort, inboxPort] = [await freePort(), await freePort()];
  const base: Record<string, string> = {
    DATABASE_URL: o.databaseUrl,
    TEMPORAL_ADDRESS: o.temporalAddress,
    TEMPORAL_NAMESPACE: o.namespace ?? 'default',
    TASK_QUEUE: `bench-${process.pid}-${Date.now()}`,
    SEAL_KEYS: Keyring.generateEntry('bench'),
    SEAL_ACTIVE_KEY: 'bench',
    BOOTSTRAP_API_KEY: BENCH_API_KEY,
    PUBLIC_BASE_URL: `http://127.0.0.1:${inboxPort}`,
    OUTBOUND_ALLOW_CIDRS: '127.0.0.1/32',
    OUTBOUND_CA_FILE: o.caFile,
    API_PORT: String(apiPort),
    INBOX_PORT: String(inboxPort),
    LOG_LEVEL: 'warn',
    DELIVERY_ORDER: defaultDeliveryOrder(),
    ...o.env,
  };
  ordersStarted.push(base.DELIVERY_ORDER!);
  const started: ServiceProc[] = [];
  const log = (k: string) => path.join(o.dir, `${k}-${base.TASK_QUEUE}.log`);
  try {
    // The api migrates the database: it starts first (combined: with the first worker, which then
    // counts among the workers, same pid).
    const workers: ServiceProc[] = [];
    const combinedPort = combined ? await freePort() : 0;
    const api = combined
      ? spawnService('api,worker', { ...base, WORKER_PORT: String(combinedPort) }, log('api-worker0'))
      : spawnService('api', base, log('api'));
    const apiProc: ServiceProc = {
      kind: combined ? 'api,worker' : 'api',
      pid: api.pid!,
      url: `http://127.0.0.1:${apiPort}`,
      child: api,
    };
    started.push(apiProc);
    await ready(apiProc.url, api, 'api', log(combined ? 'api-worker0' : 'api'), '/healthz');
    const pending: Array<Promise<void>> = [];
    if (combined) {
      const wp: ServiceProc = { ...apiProc, url: `http://127.0.0.1:${combinedPort}` };
      workers.push(wp);
      pending.push(ready(wp.url, api, 'worker 0 (with the api)', log('api-worker0')));
    }
    let inboxProc: ServiceProc | undefined;
    if (o.start?.inbox !== false) {
      const inbox = spawnService('inbox', base, log('inbox'));
      inboxProc = { kind: 'inbox', pid: inbox.pid!, url: `http://127.0.0.1:${inboxPort}`, child: inbox };
      started.push(inboxProc);
      pending.push(ready(inboxProc.url, inbox, 'inbox', log('inbox'), '/healthz'));
    }
    const workerStarts: Array<Promise<ServiceProc>> = [];
    if (o.start?.workers !== false) {
      const spawnWorker = async (i: number, tries: number): Promise<ServiceProc> => {
        const port = await freePort();
        const w = spawnService('worker', { ...base, WORKER_PORT: String(port) }, log(`worker${i}`));
        const wp: ServiceProc = { kind: 'worker', pid: w.pid!, url: `http://127.0.0.1:${port}`, child: w };
        started.push(wp);
        try {
          await ready(wp.url, w, `worker ${i}`, log(`worker${i}`));
          return wp;
        } catch (err) {
          // The free port was taken between the probe and the worker's listen (a scenario's many
          // outgoing connections take ephemeral ports): another port.
          if (tries > 1 && /EADDRINUSE/.test((err as Error).message)) return spawnWorker(i, tries - 1);
          throw err;
        }
      };
      for (let i = workers.length; i < (o.workers ?? 1); i++) workerStarts.push(spawnWorker(i, 3));
    }
    await Promise.all(pending);
    workers.push(...(await Promise.all(workerStarts)));
    return {
      api: apiProc,
      inbox: inboxProc ?? apiProc,
      workers,
      apiKey: BENCH_API_KEY,
      async stop() {
        await Promise.all(started.map((p) => stopChild(p.child)));
      },
    };
  } catch (err) {
    await Promise.all(started.map((p) => stopChild(p.child)));
    throw err;
  }
}

/**
 * A benchmark's own sender: a fresh database on the run's Postgres, api and worker processes (no
 * inbox) on the run's dev server (or on `onTemporal`), posting to `receiver`.
 */
export async function startSender(
  ctx: BenchContext,
  receiver: BenchReceiver,
  env?: Record<string, string>,
  onTemporal?: BenchTemporal,
) {
  const temporal = onTemporal ?? (await ctx.temporal());
  const databaseUrl = await freshDatabase(ctx.pg);
  const services = await startServices({
    dir: ctx.dir,
    databaseUrl,
    temporalAddress: temporal.address,
    caFile: receiver.tls.caFile,
    start: { inbox: false },
    ...(env ? { env } : {}),
  });
  return { temporal, databaseUrl, services };
}

/** A process of our own (a baseline server or worker) run through ts-node, ready when it prints READY. */
export async function spawnBenchProcess(
  script: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ child: ChildProcess; pid: number; stop(): Promise<void>; ready: string }> {
  const child = spawn(process.execPath, ['-r', 'ts-node/register/transpile-only', script, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      const m = /READY(.*)\n/.exec(out);
      if (m) resolve(m[1]!.trim());
    });
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code} before READY`)));
  });
  return { child, pid: child.pid!, ready: line, stop: () => stopChild(child) };
}

export { sleep };
