/**
 * The fault suite's processes: the service's own `src/main.ts api|inbox|worker` as children (so they
 * can be killed), embedded Postgres in a child of its own (so it can be stopped and started again on
 * the same data), and small helpers to talk to them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import type { Db } from '../../../src/db/pool';
import type { Json } from '../../helpers/harness';
import { freePort } from '../../helpers/test-services-port';
import { makeTestTls } from '../../helpers/tls';

export const ROOT = path.resolve(__dirname, '..', '..', '..');
export type Kind = 'api' | 'inbox' | 'worker';

export interface Svc {
  kind: Kind;
  proc: ChildProcess;
  port: number;
  output: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Short retry and sweep settings, so faults play out in seconds (the contract's numbers stay in unit tests). */
export const FAST = {
  DELIVERY_TIMEOUT: '2s',
  RETRY_INITIAL: '1s',
  RETRY_FACTOR: '2',
  RETRY_MAX: '4s',
  SWEEP_INTERVAL: '1s',
};

/** The environment every child shares: database, Temporal, one task queue, one keyring, the test CA. */
export function serviceEnv(o: {
  databaseUrl: string;
  temporalAddress: string;
  extra?: Record<string, string>;
}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    TS_NODE_TRANSPILE_ONLY: 'true',
    DATABASE_URL: o.databaseUrl,
    TEMPORAL_ADDRESS: o.temporalAddress,
    TASK_QUEUE: `faults-${crypto.randomBytes(4).toString('hex')}`,
    SEAL_KEYS: `k1:${crypto.randomBytes(32).toString('base64')}`,
    SEAL_ACTIVE_KEY: 'k1',
    BOOTSTRAP_API_KEY: `a2ap_fault_${crypto.randomBytes(16).toString('hex')}`,
    PUBLIC_BASE_URL: 'http://127.0.0.1:9',
    LOG_LEVEL: 'warn',
    OUTBOUND_ALLOW_CIDRS: '127.0.0.1/32',
    OUTBOUND_CA_FILE: makeTestTls().caFile,
    ...FAST,
    ...o.extra,
  };
}

const PORT_VAR: Record<Kind, string> = { api: 'API_PORT', inbox: 'INBOX_PORT', worker: 'WORKER_PORT' };

export async function spawnService(kind: Kind, env: Record<string, string>): Promise<Svc> {
  const port = await freePort();
  const proc = spawn(process.execPath, ['-r', 'ts-node/register/transpile-only', 'src/main.ts', kind], {
    cwd: ROOT,
    env: { ...env, [PORT_VAR[kind]]: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  proc.stdout!.on('data', (b: Buffer) => output.push(b.toString()));
  proc.stderr!.on('data', (b: Buffer) => output.push(b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { kind, proc, port, output, exited };
}

/** Waits for /readyz (Postgres and Temporal reachable; for the worker: polling). */
export async function ready(s: Svc, ms = 180_000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    if (s.proc.exitCode !== null || s.proc.signalCode !== null)
      throw new Error(`${s.kind} exited early:\n${s.output.join('')}`);
    const ok = await fetch(`http://127.0.0.1:${s.port}/readyz`, { signal: AbortSignal.timeout(5_000) })
      .then((r) => r.status === 200)
      .catch(() => false);
    if (ok) return;
    if (Date.now() > until) throw new Error(`${s.kind} not ready after ${ms} ms:\n${s.output.join('')}`);
    await sleep(250);
  }
}

export const alive = (s: Svc) => s.proc.exitCode === null && s.proc.signalCode === null;

export async function killHard(s: Svc): Promise<void> {
  if (alive(s)) s.proc.kill('SIGKILL');
  await s.exited;
}

export async function stopAll(svcs: Svc[]): Promise<void> {
  for (const s of svcs) if (alive(s)) s.proc.kill('SIGKILL');
  await Promise.all(svcs.map((s) => s.exited));
}

/** Peak resident set (VmHWM) of a live process, in KiB. */
export function peakRssKb(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

/** A JSON call to the API child with its bootstrap key. */
export async function apiCall(
  api: Svc,
  key: string,
  method: string,
  p: string,
  body?: unknown,
  timeoutMs = 30_000,
): Promise<{ status: number; type: string; json: Json }> {
  const res = await fetch(`http://127.0.0.1:${api.port}${p}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    body: body === undefined ? null : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = text;
  }
  return { status: res.status, type: res.headers.get('content-type') ?? '', json };
}

/** Creates push config `c` of a task through the api; anything but 201 fails the test. */
export async function createConfigVia(api: Svc, key: string, taskId: string, url: string): Promise<void> {
  const r = await apiCall(api, key, 'POST', `/v1/tasks/${taskId}/pushNotificationConfigs`, { id: 'c', url });
  expect(r.status).toBe(201);
}

/**
 * Writes a "working" status update to a task through the api (with `metadata`, when given, to tell the
 * events apart); anything but 202 fails the test. Returns the id of its first delivery.
 */
export async function writeEventVia(
  api: Svc,
  key: string,
  taskId: string,
  metadata?: Record<string, unknown>,
): Promise<string> {
  const r = await apiCall(api, key, 'POST', `/v1/tasks/${taskId}/events`, {
    streamResponse: {
      statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' }, ...(metadata ? { metadata } : {}) },
    },
  });
  expect(r.status).toBe(202);
  return r.json.deliveries[0].id as string;
}

/** A job's attempt rows, in order. */
export async function attemptRowsOf(db: Db, jobId: string) {
  return (
    await db.query<{ n: number; outcome: string | null; http_status: number | null; error: string | null }>(
      'SELECT n, outcome, http_status, error FROM delivery_attempts WHERE job_id = $1 ORDER BY n',
      [jobId],
    )
  ).rows;
}

export interface OwnPg {
  url: string;
  dir: string;
  port: number;
  stop(): Promise<void>;
  start(): Promise<void>;
  remove(): Promise<void>;
}

/** Embedded Postgres of the test's own, in a child: stop() and start() keep the data and the port. */
export async function startOwnPg(): Promise<OwnPg> {
  const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'a2a-push-fault-pg-'));
  const port = await freePort();
  let child: ChildProcess | undefined;
  let url = '';
  const start = async () => {
    const c = spawn(
      process.execPath,
      [
        '-r',
        'ts-node/register/transpile-only',
        path.join(__dirname, 'pg-server.ts'),
        path.join(dir, 'pg'),
        String(port),
      ],
      { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, TS_NODE_TRANSPILE_ONLY: 'true' } },
    );
    const err: string[] = [];
    c.stderr!.on('data', (b: Buffer) => err.push(b.toString()));
    const line = await new Promise<string>((resolve, reject) => {
      readline.createInterface({ input: c.stdout! }).once('line', resolve);
      c.once('exit', (code) => reject(new Error(`pg-server exited with ${code}: ${err.join('')}`)));
    });
    url = (JSON.parse(line) as { url: string }).url;
    child = c;
  };
  const stop = async () => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      c.once('exit', () => resolve());
      c.kill('SIGTERM');
    });
  };
  await start();
  return {
    get url() {
      return url;
    },
    dir,
    port,
    stop,
    start,
    async remove() {
      await stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
