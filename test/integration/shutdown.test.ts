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
  o: {
    method?: string;
    headers?: Record<string, string>;
    body?: unknown;
    agent?: http.Agent;
    timeoutMs?: number;
  } = {},
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
    if (o.timeoutMs) req.setTimeout(o.timeoutMs, () => req.destroy(new Error('timed out')));
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
    // Bounded: while the child is still starting, another process may hold the port and not answer.
    const r = await request(c.port, '/readyz', { timeoutMs: 2_000 }).catch(() => undefined);
    if (r?.status === 200) return;
    if (Date.now() > deadline) throw new Error(`${c.kind} not ready:\n${c.output.join('')}`);
    await sleep(100);
  }
}

const PORT_ENV: Record<Kind, string> = { api: 'API_PORT', inbox: 'INBOX_PORT', worker: 'WORKER_PORT' };

/**
 * Starts `kind` and waits for it to be ready. Its port is free when chosen, not when the child binds it:
 * a child that exits with EADDRINUSE is started again on a new port, twice at most.
 */
async function startReady(kind: Kind): Promise<Child> {
  for (let attempt = 1; ; attempt++) {
    const c = start(kind);
    try {
      await ready(c);
      return c;
    } catch (err) {
      if (attempt >= 3 || !c.output.join('').includes('EADDRINUSE')) throw err;
      ports[kind] = await freePort();
      env[PORT_ENV[kind]] = String(ports[kind]);
      if (kind === 'inbox') env.PUBLIC_BASE_URL = `http://127.0.0.1:${ports.inbox}`;
    }
  }
}

async function waitForOutput(c: Child, text: string) {
  while (!c.output.join('').includes(text)) {
    if (c.proc.exitCode !== null) throw new Error(`${c.kind} exited before printing "${text}"`);
    await sleep(50);
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

/**
 * Holds every reader of feed_items (an ACCESS EXCLUSIVE lock in a transaction of the test's own) so a
 * long-poll can be caught inside its handler: `reader()` resolves once one is seen waiting on the lock.
 */
async function holdFeed() {
  const c = await tdb.db.connect();
  await c.query('BEGIN');
  await c.query('LOCK TABLE feed_items IN ACCESS EXCLUSIVE MODE');
  return {
    async reader() {
      for (;;) {
        const r = await tdb.db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%feed_items%'`,
        );
        if (r.rows[0]!.n > 0) return;
        await sleep(50);
      }
    },
    async release() {
      await c.query('COMMIT');
      c.release();
    },
  };
}

beforeAll(async () => {
  if (!process.env.TEST_TEMPORAL_ADDRESS) throw new Error('TEST_TEMPORAL_ADDRESS is not set (global setup)');
  tdb = await createTestDb();
  apiKey = (await createApiKey(tdb.db, 'tenant-shutdown')).key;
  receiver = await startReceiver();
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
    SEAL_ACTIVE_KEY: 'k1',
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
  await Promise.all(
    (['api', 'inbox', 'worker'] as const).map(async (kind) => (procs[kind] = await startReady(kind))),
  );
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

  // The push is answered only when the test says so, so SIGTERM finds it in flight.
  let answer!: () => void;
  receiver.setScript(() => ({ status: 200, body: 'ok', gate: new Promise<void>((r) => (answer = r)) }));
  await receiver.waitFor(1, 20_000); // the POST has arrived and waits for its answer
  worker.proc.kill('SIGTERM');
  await waitForOutput(worker, 'SIGTERM received');
  // The worker is draining (no longer RUNNING, so its /readyz says 503) and still up, waiting for the
  // activity; only then does the receiver answer.
  for (;;) {
    const r = await get(worker.port, '/readyz');
    if (r.status === 503) break;
    await sleep(50);
  }
  expect(worker.proc.exitCode).toBeNull();
  answer();

  const exit = await exitWithin(worker, 25_000);
  expect(exit).toMatchObject({ code: 0, signal: null });
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
    const feed = await holdFeed();
    let inFlight: Promise<Answer>;
    try {
      inFlight = get(api.port, '/v1/resolutions?wait=30', auth, agent);
      void inFlight.catch(() => undefined); // awaited below; if an earlier expect fails, it must not leak
      await feed.reader(); // the long poll is inside its handler, reading the feed
      api.proc.kill('SIGTERM');
      await waitForOutput(api, 'SIGTERM received');
      // The listener closes at once, while the long poll is still held inside its handler. A
      // connection that lands in the accept queue just as the listener closes is reset (ECONNRESET):
      // that is the close racing the handshake, so try again until the port refuses outright.
      let fate = 'connected';
      for (let i = 0; i < 40 && fate !== 'ECONNREFUSED'; i++) {
        fate = await tryConnect(api.port);
        if (fate !== 'ECONNREFUSED') await sleep(50);
      }
      expect(fate).toBe('ECONNREFUSED');
    } finally {
      await feed.release();
    }

    // A long poll answers what it has at once on shutdown (an empty page), rather than waiting out its
    // 30 s: the process exits well within that.
    const answer = await inFlight;
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toEqual({ items: [], nextCursor: '0' });
    const exit = await exitWithin(api, 15_000);
    expect(exit).toMatchObject({ code: 0, signal: null });
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
  const api = await startReady('api');
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const auth = { authorization: `Bearer ${apiKey}` };
  let stop = false;
  let answered = 0;
  const loop = (async () => {
    while (!stop)
      await get(api.port, '/v1/resolutions?wait=1', auth, agent).then(
        () => (answered += 1),
        () => sleep(100),
      );
  })();
  try {
    while (answered === 0) await sleep(50); // the keep-alive connection is open and reused
    const feed = await holdFeed();
    try {
      await feed.reader(); // a poll is inside its handler on that connection
      api.proc.kill('SIGTERM');
      await waitForOutput(api, 'SIGTERM received');
    } finally {
      await feed.release();
    }
    const exit = await exitWithin(api, 10_000);
    expect(exit).toMatchObject({ code: 0, signal: null });
  } finally {
    stop = true;
    await loop;
    agent.destroy();
  }
}, 30_000);
