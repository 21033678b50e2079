/**
 * SIGTERM (contract section 7): listeners stop accepting, in-flight requests finish, the worker drains,
 * then exit 0. Tested on real processes: `src/main.ts api|inbox|worker` as children, signalled.
 */
import { freePort } from '../helpers/test-services-port';
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { createApiKey } from '../../src/db/apikeys';
import { createTestDb, type TestDb } from '../helpers/db';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { makeTestTls } from '../helpers/tls';

const ROOT = path.resolve(__dirname, '..', '..');
type Kind = 'api' | 'inbox' | 'worker';

interface Child {
  kind: Kind;
  proc: ChildProcess;
  port: number;
  output: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Answer {
  status: number;
  body: string;
}

function request(
  port: number,
  p: string,
  o: { method?: string; headers?: Record<string, string>; body?: unknown; agent?: http.Agent } = {},
) {
  return new Promise<Answer>((resolve, reject) => {
    const body = o.body === undefined ? undefined : JSON.stringify(o.body);
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: p,
        method: o.method ?? 'GET',
        headers: { ...(body ? { 'content-type': 'application/json' } : {}), ...o.headers },
        ...(o.agent ? { agent: o.agent } : {}),
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const get = (port: number, p: string, headers: Record<string, string> = {}, agent?: http.Agent) =>
  request(port, p, { headers, ...(agent ? { agent } : {}) });

/** Resolves with the connection's fate: 'connected' or the error code (ECONNREFUSED once closed). */
const tryConnect = (port: number) =>
  new Promise<string>((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve('connected');
    });
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
  });

let tdb: TestDb;
let receiver: Receiver;
let apiKey: string;
let env: Record<string, string>;
let ports: Record<Kind, number>;
const children: Child[] = [];

function start(kind: Kind): Child {
  const proc = spawn(process.execPath, ['-r', 'ts-node/register/transpile-only', 'src/main.ts', kind], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  proc.stdout!.on('data', (b: Buffer) => output.push(b.toString()));
  proc.stderr!.on('data', (b: Buffer) => output.push(b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    proc.once('exit', (code, signal) => resolve({ code, signal, at: Date.now() })),
  );
  const child = { kind, proc, port: ports[kind], output, exited };
  children.push(child);
  return child;
}

/** Waits for /readyz (Postgres and Temporal reachable; for the worker: polling). */
async function ready(c: Child, ms = 40_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (c.proc.exitCode !== null) throw new Error(`${c.kind} exited early:\n${c.output.join('')}`);
    const r = await get(c.port, '/readyz').catch(() => undefined);
    if (r?.status === 200) return;
    if (Date.now() > deadline) throw new Error(`${c.kind} not ready:\n${c.output.join('')}`);
    await sleep(100);
  }
}

async function exitWithin(c: Child, ms: number) {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  const r = await Promise.race([c.exited, timeout]).finally(() => clearTimeout(timer));
  if (r === 'timeout') throw new Error(`${c.kind} did not exit within ${ms} ms:\n${c.output.join('')}`);
  return r;
}

const procs: Partial<Record<Kind, Child>> = {};

beforeAll(async () => {
  if (!process.env.TEST_TEMPORAL_ADDRESS) throw new Error('TEST_TEMPORAL_ADDRESS is not set (global setup)');
  tdb = await createTestDb();
  apiKey = (await createApiKey(tdb.db, 'tenant-shutdown')).key;
  // The worker's push is answered slowly, so SIGTERM finds it in flight.
  receiver = await startReceiver({ script: () => ({ status: 200, body: 'ok', delayMs: 2_500 }) });
  ports = { api: await freePort(), inbox: await freePort(), worker: await freePort() };
  env = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    TS_NODE_TRANSPILE_ONLY: 'true',
    DATABASE_URL: tdb.url,
    TEMPORAL_ADDRESS: process.env.TEST_TEMPORAL_ADDRESS,
    TEMPORAL_NAMESPACE: process.env.TEST_TEMPORAL_NAMESPACE ?? 'default',
    TASK_QUEUE: `shutdown-${crypto.randomBytes(4).toString('hex')}`,
    SEAL_KEYS: `k1:${crypto.randomBytes(32).toString('base64')}`,
    PUBLIC_BASE_URL: `http://127.0.0.1:${ports.inbox}`,
    API_PORT: String(ports.api),
    INBOX_PORT: String(ports.inbox),
    WORKER_PORT: String(ports.worker),
    LOG_LEVEL: 'warn',
    // The receiver is local and uses the test CA: allow it past the address guard.
    OUTBOUND_ALLOW_CIDRS: '127.0.0.1/32',
    OUTBOUND_CA_FILE: makeTestTls().caFile,
  };
  // All three at once: their start-ups (ts-node, the worker's webpack bundle) overlap.
  for (const kind of ['api', 'inbox', 'worker'] as const) procs[kind] = start(kind);
  await Promise.all(Object.values(procs).map((c) => ready(c)));
}, 50_000);

afterAll(async () => {
  for (const c of children)
    if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  await Promise.all(children.map((c) => c.exited));
  await receiver?.close();
  await tdb?.drop();
});

it('worker: SIGTERM lets the activity in flight finish (the push lands, the job is delivered), exits 0', async () => {
  const worker = procs.worker!;
  const api = procs.api!;
  const auth = { authorization: `Bearer ${apiKey}` };
  const cfg = await request(api.port, '/v1/tasks/task-drain/pushNotificationConfigs', {
    method: 'POST',
    headers: auth,
    body: { id: 'drain', url: receiver.url },
  });
  expect(cfg.status).toBe(201);
  const ev = await request(api.port, '/v1/tasks/task-drain/events', {
    method: 'POST',
    headers: auth,
    body: {
      streamResponse: { statusUpdate: { taskId: 'task-drain', status: { state: 'TASK_STATE_WORKING' } } },
    },
  });
  expect(ev.status).toBe(202);
  const jobId = (JSON.parse(ev.body) as { deliveries: Array<{ id: string }> }).deliveries[0]!.id;

  await receiver.waitFor(1, 20_000); // the POST has arrived; its answer comes 2.5 s later
  worker.proc.kill('SIGTERM');
  const signalled = Date.now();

  const exit = await exitWithin(worker, 25_000);
  expect(exit).toMatchObject({ code: 0, signal: null });
  expect(exit.at - signalled).toBeGreaterThanOrEqual(1_500); // it waited for the activity
  expect(worker.output.join('')).toContain('SIGTERM received');
  const job = await tdb.db.query<{ status: string }>('SELECT status FROM delivery_jobs WHERE id = $1', [
    jobId,
  ]);
  expect(job.rows[0]?.status).toBe('delivered');
  const att = await tdb.db.query<{ outcome: string; http_status: number }>(
    'SELECT outcome, http_status FROM delivery_attempts WHERE job_id = $1',
    [jobId],
  );
  expect(att.rows).toEqual([{ outcome: 'delivered', http_status: 200 }]);
  expect(receiver.requests).toHaveLength(1);
  expect(await tryConnect(worker.port)).toBe('ECONNREFUSED');
}, 40_000);

it('api: SIGTERM lets an in-flight request finish with 200, refuses new connections, exits 0', async () => {
  const api = procs.api!;
  // A keep-alive client, as nr-llm's would be: the server must still let go of its connection.
  const agent = new http.Agent({ keepAlive: true });
  try {
    const auth = { authorization: `Bearer ${apiKey}` };
    expect((await get(api.port, '/v1/resolutions?wait=0', auth, agent)).status).toBe(200);
    const began = Date.now();
    let settled = false;
    const inFlight = get(api.port, '/v1/resolutions?wait=3', auth, agent).finally(() => (settled = true));
    void inFlight.catch(() => undefined); // awaited below; if an earlier expect fails, it must not leak
    await sleep(500); // the long poll is waiting inside the handler
    api.proc.kill('SIGTERM');
    const signalled = Date.now();

    // The listener closes at once, while the long poll is still running. A connection that lands in
    // the accept queue just as the listener closes is reset (ECONNRESET): that is the close racing
    // the handshake, so try again until the port refuses outright.
    let fate = 'connected';
    for (let i = 0; i < 40 && fate !== 'ECONNREFUSED'; i++) {
      fate = await tryConnect(api.port);
      if (fate !== 'ECONNREFUSED') await sleep(50);
    }
    expect(fate).toBe('ECONNREFUSED');

    const answer = await inFlight;
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toEqual({ items: [], nextCursor: '0' });
    // A long poll answers what it has at once on shutdown (an empty page), rather than holding it up.
    expect(settled).toBe(true);
    expect(Date.now() - began).toBeLessThan(3_000);

    const exit = await exitWithin(api, 15_000);
    expect(exit).toMatchObject({ code: 0, signal: null });
    expect(exit.at - signalled).toBeLessThan(15_000);
    expect(await tryConnect(api.port)).toBe('ECONNREFUSED');
  } finally {
    agent.destroy();
  }
}, 30_000);

it('inbox: SIGTERM stops the listener and exits 0', async () => {
  const inbox = procs.inbox!;
  inbox.proc.kill('SIGTERM');
  const exit = await exitWithin(inbox, 15_000);
  expect(exit).toMatchObject({ code: 0, signal: null });
  expect(await tryConnect(inbox.port)).toBe('ECONNREFUSED');
}, 20_000);

// server.close() alone leaves a keep-alive connection that had a request in flight at SIGTERM open,
// and Node would keep serving new requests on it: shutdown answers those with Connection: close.
it('api: a keep-alive client that keeps polling does not hold shutdown open', async () => {
  ports.api = await freePort();
  env.API_PORT = String(ports.api);
  const api = start('api');
  await ready(api);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const auth = { authorization: `Bearer ${apiKey}` };
  let stop = false;
  const loop = (async () => {
    while (!stop) await get(api.port, '/v1/resolutions?wait=1', auth, agent).catch(() => sleep(100));
  })();
  try {
    await sleep(1_500); // mid-request
    api.proc.kill('SIGTERM');
    const exit = await exitWithin(api, 10_000);
    expect(exit).toMatchObject({ code: 0, signal: null });
  } finally {
    stop = true;
    await loop;
    agent.destroy();
  }
}, 30_000);
