/**
 * Postgres stopped and restarted under a stream of event writes: every write either answered 202 and
 * is delivered, or answered 503 problem+json and left no row; the API and the worker recover without
 * a restart of their own (the same processes serve before, during and after).
 *
 * Real processes: embedded Postgres in a child of this file's own (stopped with a fast shutdown, then
 * started again on the same data and port), `src/main.ts api` and `src/main.ts worker` as children,
 * the run's dev server, an HTTPS receiver on 127.0.0.1 that answers 200.
 */
import { Client } from 'pg';
import { eventually } from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';
import {
  alive,
  apiCall,
  ready,
  serviceEnv,
  sleep,
  spawnService,
  startOwnPg,
  stopAll,
  type OwnPg,
  type Svc,
} from './helpers/procs';

const TASKS = 20;
const WRITERS = 4;

let pg: OwnPg;
let receiver: Receiver;
let env: Record<string, string>;
let api: Svc;
let worker: Svc;
const svcs: Svc[] = [];

beforeAll(async () => {
  pg = await startOwnPg();
  receiver = await startReceiver();
  env = serviceEnv({
    databaseUrl: pg.url,
    temporalAddress: process.env.TEST_TEMPORAL_ADDRESS!,
    // Every event of a task stays its own delivery (none superseded), so every 202 must be delivered.
    extra: { OUTBOX_BOUND_PER_CONFIG: '100000' },
  });
  api = await spawnService('api', env);
  worker = await spawnService('worker', env);
  svcs.push(api, worker);
  await Promise.all([ready(api), ready(worker)]);
});

let stopWriters = () => undefined as void;

afterAll(async () => {
  stopWriters();
  await stopAll(svcs);
  await receiver?.close();
  await pg?.remove();
});

interface Write {
  k: number;
  status: number;
  type: string;
  problem?: string;
  deliveryId?: string;
  error?: string;
}

it('Postgres stopped and restarted under writes: each write 202 and delivered, or 503 and no row; nothing restarted', async () => {
  const key = env.BOOTSTRAP_API_KEY!;
  for (let i = 0; i < TASKS; i++) {
    const r = await apiCall(api, key, 'POST', `/v1/tasks/pg-${i}/pushNotificationConfigs`, {
      id: 'c',
      url: receiver.url,
    });
    expect(r.status).toBe(201);
  }
  const apiPid = api.proc.pid;
  const workerPid = worker.proc.pid;

  const writes: Write[] = [];
  let k = 0;
  let writing = true;
  // A failed expectation must not leave the writers running (jest would never exit).
  stopWriters = () => {
    writing = false;
  };
  const writer = async () => {
    while (writing) {
      const mine = k++;
      const taskId = `pg-${mine % TASKS}`;
      try {
        const r = await apiCall(
          api,
          key,
          'POST',
          `/v1/tasks/${taskId}/events`,
          {
            streamResponse: {
              statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' }, metadata: { k: mine } },
            },
          },
          20_000,
        );
        writes.push({
          k: mine,
          status: r.status,
          type: r.type,
          problem: r.status === 202 ? undefined : r.json?.type,
          deliveryId: r.status === 202 ? r.json.deliveries[0].id : undefined,
        });
      } catch (err) {
        writes.push({ k: mine, status: 0, type: '', error: (err as Error).message });
      }
      await sleep(20);
    }
  };
  const writers = Array.from({ length: WRITERS }, writer);

  await sleep(3_000);
  const before = writes.length;
  await pg.stop();
  const stoppedAt = writes.length;
  await sleep(6_000);
  const during = writes.slice(stoppedAt);
  await pg.start();
  const restartedAt = writes.length;
  // Writes succeed again on the same API process.
  await eventually(
    async () => writes.slice(restartedAt).filter((w) => w.status === 202).length,
    (n) => n >= 20,
    60_000,
  ).catch((err: Error) => {
    const last = writes.slice(-5).map((w) => `${w.status} ${w.problem ?? w.error ?? ''}`);
    throw new Error(
      `${err.message}; last writes: ${last.join(' | ')}; api said:\n${api.output.join('').slice(-3000)}`,
    );
  });
  writing = false;
  await Promise.all(writers);

  // Every answer is a 202 or a 503 problem+json; none is lost in between (no 500, no timeout).
  const other = writes.filter((w) => w.status !== 202 && w.status !== 503);
  expect(other).toEqual([]);
  const refused = writes.filter((w) => w.status === 503);
  for (const w of refused) {
    expect(w.type).toContain('application/problem+json');
    expect(w.problem).toMatch(/unavailable$/);
  }
  // While Postgres was down the API answered 503 at once (it did not hang).
  expect(during.length).toBeGreaterThan(0);
  expect(refused.length).toBeGreaterThan(0);

  const accepted = writes.filter((w) => w.status === 202);
  const db = new Client({ connectionString: pg.url });
  await db.connect();
  try {
    // A 503 left no row; a 202 left exactly one event.
    const stored = await db.query<{ k: number; n: string }>(
      `SELECT (body::json #>> '{statusUpdate,metadata,k}')::int AS k, count(*) AS n FROM task_events GROUP BY 1`,
    );
    const storedK = new Map(stored.rows.map((r) => [r.k, Number(r.n)]));
    for (const w of refused) expect(storedK.has(w.k)).toBe(false);
    for (const w of accepted) expect(storedK.get(w.k)).toBe(1);
    expect(storedK.size).toBe(accepted.length);

    // Every 202 is delivered: the job says so and the receiver has its body.
    const ids = accepted.map((w) => w.deliveryId!);
    await eventually(
      async () =>
        Number(
          (
            await db.query<{ n: string }>(
              `SELECT count(*) AS n FROM delivery_jobs WHERE id = ANY($1::uuid[]) AND status = 'delivered'`,
              [ids],
            )
          ).rows[0]!.n,
        ),
      (n) => n === ids.length,
      240_000,
    );
    const seenK = new Set(
      receiver.requests.map(
        (r) =>
          (JSON.parse(r.body.toString()) as { statusUpdate: { metadata: { k: number } } }).statusUpdate
            .metadata.k,
      ),
    );
    const lost = accepted.filter((w) => !seenK.has(w.k));
    expect(lost).toEqual([]);
    const duplicates = receiver.requests.length - seenK.size;

    // The same processes throughout: neither the API nor the worker was restarted.
    expect(alive(api) && api.proc.pid === apiPid).toBe(true);
    expect(alive(worker) && worker.proc.pid === workerPid).toBe(true);
    process.stdout.write(
      `postgres-restart: ${writes.length} writes (${before} before the stop, ${during.length} while down), ` +
        `${accepted.length} × 202 all delivered, ${refused.length} × 503 with no row, writes lost ${lost.length}, ` +
        `duplicates seen ${duplicates}\n`,
    );
  } finally {
    await db.end();
  }
});
