/**
 * Temporal server stopped and restarted: the dev server with a file store (WAL + synchronous=normal,
 * as the embedded start runs it) is killed (SIGKILL) while five deliveries wait in their backoff, and
 * ten events are acknowledged while it is down, before their workflows could start. After it comes
 * back on the same file: the sweeper starts the ten, the five continue from the file store, every job
 * is delivered, and each has exactly one workflow run; the sweeper made to start every job again (as
 * after a start whose answer was lost) starts none twice (the id reuse policy).
 * The API and the worker are the same processes throughout.
 *
 * Real processes: the dev server (a child of this file's own), `src/main.ts api` and `src/main.ts
 * worker` as children, the run's Postgres (a database of this file's own), an HTTPS receiver.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Connection, Client } from '@temporalio/client';
import { startDevServer, type DevServer } from '../../src/embedded/temporal';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { createTestDb, type TestDb } from '../helpers/db';
import { eventually } from '../helpers/harness';
import { freePort } from '../helpers/test-services-port';
import { startReceiver, type Receiver } from '../helpers/receiver';
import {
  alive,
  apiCall,
  ready,
  serviceEnv,
  sleep,
  spawnService,
  stopAll,
  type Svc,
  writeEventVia,
} from './helpers/procs';

let tdb: TestDb;
let receiver: Receiver;
let env: Record<string, string>;
let api: Svc;
let worker: Svc;
let server: DevServer | undefined;
let port: number;
let dbFile: string;
const svcs: Svc[] = [];
const seen = new Map<string, number>();
const deliveryOf = (r: { headers: Record<string, string | string[] | undefined> }) =>
  String(r.headers['x-a2a-push-delivery']);
const requestsFor = (id: string) => receiver.requests.filter((r) => deliveryOf(r) === id);

beforeAll(async () => {
  tdb = await createTestDb();
  port = await freePort();
  dbFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-fault-temporal-')), 'temporal.db');
  server = await startDevServer({ port, dbFile });
  // /retry: the first request of a job is answered 503 (the job waits 8-12 s), later ones 200.
  receiver = await startReceiver({
    script: (req) => {
      const id = deliveryOf(req);
      const n = (seen.get(id) ?? 0) + 1;
      seen.set(id, n);
      return req.path === '/retry' && n === 1 ? { status: 503 } : { status: 200 };
    },
  });
  env = serviceEnv({
    databaseUrl: tdb.url,
    temporalAddress: server.address,
    // Five jobs of one config in backoff at once: each job's own durability through the restart is
    // what this tests, so without the per-config order (faults/ordered-delivery.test.ts keeps order).
    extra: { RETRY_INITIAL: '10s', RETRY_MAX: '20s', DELIVERY_ORDER: 'none' },
  });
  api = await spawnService('api', env);
  worker = await spawnService('worker', env);
  svcs.push(api, worker);
  await Promise.all([ready(api), ready(worker)]);
});

afterAll(async () => {
  await stopAll(svcs);
  await server?.stop();
  await receiver?.close();
  await tdb?.drop();
  if (dbFile) fs.rmSync(path.dirname(dbFile), { recursive: true, force: true });
});

const jobs = async (ids: string[]) =>
  (
    await tdb.db.query<{ id: string; status: string; dispatched: boolean; attempt_count: number }>(
      `SELECT id, status, dispatched_at IS NOT NULL AS dispatched, attempt_count FROM delivery_jobs WHERE id = ANY($1::uuid[])`,
      [ids],
    )
  ).rows;

it('dev server killed with deliveries waiting and events acknowledged but not started: after its restart every job is delivered, one run each', async () => {
  const key = env.BOOTSTRAP_API_KEY!;
  const base = receiver.url.replace(/\/hook$/, '');
  for (const [taskId, p] of [
    ['waiting', '/retry'],
    ['queued', '/ok'],
  ]) {
    const c = await apiCall(api, key, 'POST', `/v1/tasks/tr-${taskId}/pushNotificationConfigs`, {
      id: 'c',
      url: `${base}${p}`,
    });
    expect(c.status).toBe(201);
  }
  const write = (taskId: string, i: number) => writeEventVia(api, key, taskId, { i });

  // Five deliveries in their backoff wait when the server dies.
  const waiting: string[] = [];
  for (let i = 0; i < 5; i++) waiting.push(await write('tr-waiting', i));
  await eventually(
    () => jobs(waiting),
    (rows) => rows.filter((r) => r.status === 'waiting_retry').length === 5,
    60_000,
  );
  server!.process.kill('SIGKILL');
  await new Promise((r) => server!.process.once('exit', r));

  // Ten events acknowledged while it is down: 202 at once, no workflow started.
  const queued: string[] = [];
  for (let i = 0; i < 10; i++) queued.push(await write('tr-queued', i));
  await sleep(3_000); // several sweeps fail meanwhile
  const whileDown = await jobs(queued);
  expect(whileDown.every((r) => r.status === 'queued' && !r.dispatched)).toBe(true);
  expect(receiver.requests.filter((r) => r.path === '/ok')).toHaveLength(0);

  // The same server again, on the same file and port.
  server = await startDevServer({ port, dbFile });
  const all = [...waiting, ...queued];
  await eventually(
    () => jobs(all),
    (rows) => rows.length === all.length && rows.every((r) => r.status === 'delivered'),
    180_000,
  );
  for (const id of waiting) expect(requestsFor(id).map((r) => r.path)).toEqual(['/retry', '/retry']);
  for (const id of queued) expect(requestsFor(id)).toHaveLength(1);
  const attempts = await tdb.db.query<{ job_id: string; n: number; http_status: number }>(
    'SELECT job_id, n, http_status FROM delivery_attempts WHERE job_id = ANY($1::uuid[]) ORDER BY job_id, n',
    [all],
  );
  for (const id of waiting)
    expect(attempts.rows.filter((a) => a.job_id === id).map((a) => a.http_status)).toEqual([503, 200]);
  for (const id of queued)
    expect(attempts.rows.filter((a) => a.job_id === id).map((a) => a.http_status)).toEqual([200]);

  // Exactly one run per job, each completed: nothing was started twice.
  const connection = await Connection.connect({ address: server.address });
  try {
    const client = new Client({ connection });
    for (const id of all) {
      const runs: string[] = [];
      for await (const w of client.workflow.list({ query: `WorkflowId = '${makeDeliveryWorkflowId(id)}'` }))
        runs.push(w.status.name);
      expect(runs).toEqual(['COMPLETED']);
    }
  } finally {
    await connection.close();
  }
  expect(alive(api) && alive(worker)).toBe(true);
  process.stdout.write(
    `temporal-restart: ${waiting.length} waiting + ${queued.length} acknowledged while down, all delivered, ` +
      `one run each, ${receiver.requests.length} requests (${receiver.requests.length - all.length - waiting.length} duplicates)\n`,
  );
});
