/**
 * Config deleted during a flight: the request already on the wire arrives (the receiver sees it), and
 * no later attempt starts. The attempt on the wire ends as its answer says: a 2xx still makes the job
 * `delivered` (the receiver has it); a retryable answer (503, timeout) ends the job `cancelled`
 * (`config_deleted`) at its next decision instead of a second POST.
 *
 * Real processes: `src/main.ts api` and `src/main.ts worker` as children, the run's dev server and
 * Postgres (a database of this file's own), a scripted HTTPS receiver on 127.0.0.1.
 */
import { createTestDb, type TestDb } from '../helpers/db';
import { eventually } from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';
import {
  apiCall,
  attemptRowsOf,
  FAST,
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
const svcs: Svc[] = [];

const deliveryOf = (r: { headers: Record<string, string | string[] | undefined> }) =>
  String(r.headers['x-a2a-push-delivery']);
const requestsFor = (id: string) => receiver.requests.filter((r) => deliveryOf(r) === id);

beforeAll(async () => {
  tdb = await createTestDb();
  // Every answer takes 1.5 s, long enough to delete the config while the request is on the wire.
  receiver = await startReceiver({
    script: (req) => {
      if (req.path === '/ok') return { status: 200, delayMs: 1_500 };
      if (req.path === '/busy') return { status: 503, delayMs: 1_500 };
      return { hang: true }; // /hang: no answer; the attempt times out after DELIVERY_TIMEOUT (2 s)
    },
  });
  env = serviceEnv({ databaseUrl: tdb.url, temporalAddress: process.env.TEST_TEMPORAL_ADDRESS! });
  api = await spawnService('api', env);
  const worker = await spawnService('worker', env);
  svcs.push(api, worker);
  await Promise.all([ready(api), ready(worker)]);
});

afterAll(async () => {
  await stopAll(svcs);
  await receiver?.close();
  await tdb?.drop();
});

const job = async (id: string) =>
  (
    await tdb.db.query<{ status: string; reason: string | null; attempt_count: number }>(
      'SELECT status, reason, attempt_count FROM delivery_jobs WHERE id = $1',
      [id],
    )
  ).rows[0]!;

const attemptsOf = (id: string) => attemptRowsOf(tdb.db, id);

it.each([
  ['/ok', 'delivered', 'http_200', { outcome: 'delivered', http_status: 200 }],
  ['/busy', 'cancelled', 'config_deleted', { outcome: 'retry', http_status: 503 }],
  ['/hang', 'cancelled', 'config_deleted', { outcome: 'retry', http_status: null, error: 'timeout' }],
])(
  'deleted while %s is on the wire: the request arrives, the job ends %s, no later attempt',
  async (p, status, reason, attempt) => {
    const key = env.BOOTSTRAP_API_KEY!;
    const taskId = `deleted${p.replace('/', '-')}`;
    const c = await apiCall(api, key, 'POST', `/v1/tasks/${taskId}/pushNotificationConfigs`, {
      id: 'c',
      url: receiver.url.replace(/\/hook$/, p),
    });
    expect(c.status).toBe(201);
    const id = await writeEventVia(api, key, taskId);

    // The request is on the wire: the receiver has it and has not answered.
    await eventually(
      async () => requestsFor(id).length,
      (n) => n === 1,
      60_000,
    );
    const onWire = await job(id);
    expect(onWire.status).toBe('in_flight');
    const d = await apiCall(api, key, 'DELETE', `/v1/tasks/${taskId}/pushNotificationConfigs/c`);
    expect(d.status).toBe(204);

    const final = await eventually(
      () => job(id),
      (j) => !['queued', 'in_flight', 'waiting_retry'].includes(j.status),
      60_000,
    );
    expect(final).toMatchObject({ status, reason, attempt_count: 1 });
    // Longer than any wait the schedule could have chosen (RETRY_MAX × 1.2): still one request, one attempt.
    await sleep(Number(FAST.RETRY_MAX.replace('s', '')) * 1_200 + 2_000);
    expect(requestsFor(id)).toHaveLength(1);
    const rows = await attemptsOf(id);
    expect(rows).toEqual([expect.objectContaining({ n: 1, ...attempt })]);
    expect(await job(id)).toMatchObject({ status, attempt_count: 1 });
    // The API tells the same story.
    const g = await apiCall(api, key, 'GET', `/v1/deliveries/${id}`);
    expect(g.status).toBe(200);
    expect(g.json).toMatchObject({
      status,
      attempts: [expect.objectContaining({ n: 1, outcome: attempt.outcome })],
    });
  },
);
