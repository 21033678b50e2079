/**
 * Flapping receiver: every request is answered, at random from a fixed seed, 200, 503, a timeout (no
 * answer within DELIVERY_TIMEOUT) or a connection reset. Every job ends in a status the contract
 * allows (delivered, or exhausted after 8 attempts), attempts never exceed 8, each attempt row says
 * what the receiver did, and the spacing between attempts follows the schedule: the wait each workflow
 * chose after attempt n (its timer) is within 0.8-1.2 × min(RETRY_MAX, RETRY_INITIAL × RETRY_FACTOR^(n−1)),
 * and attempt n+1 never started before the lower bound (no upper bound in real time: that is load).
 *
 * Real processes: `src/main.ts api` and `src/main.ts worker` as children, the run's dev server and
 * Postgres (a database of this file's own), a scripted HTTPS receiver on 127.0.0.1.
 */
import { createTestDb, type TestDb } from '../helpers/db';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { connectDevServer, eventually } from '../helpers/harness';
import { startReceiver, type Receiver, type ScriptedAnswer } from '../helpers/receiver';
import {
  apiCall,
  FAST,
  ready,
  serviceEnv,
  spawnService,
  stopAll,
  type Svc,
  writeEventVia,
} from './helpers/procs';

const JOBS = 30;
const SEED = 0x5eed_f1a9;
const MAX_ATTEMPTS = 8;

/** mulberry32: a small seeded generator, so a failing run can be replayed exactly. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Act = 'ok' | '503' | 'timeout' | 'reset';
const ANSWER: Record<Act, ScriptedAnswer> = {
  ok: { status: 200 },
  '503': { status: 503 },
  timeout: { hang: true },
  reset: { destroy: true },
};

let tdb: TestDb;
let receiver: Receiver;
let env: Record<string, string>;
let api: Svc;
const svcs: Svc[] = [];
/** What the receiver did, per delivery id, in order. */
const acted = new Map<string, Act[]>();

beforeAll(async () => {
  tdb = await createTestDb();
  // One generator per task (its requests come one after another), so the script does not depend on
  // the order in which concurrent jobs reach the receiver.
  const randoms = new Map<string, () => number>();
  receiver = await startReceiver({
    script: (req) => {
      const id = String(req.headers['x-a2a-push-delivery']);
      const taskId = String(
        (JSON.parse(req.body.toString()) as { statusUpdate: { taskId: string } }).statusUpdate.taskId,
      );
      if (!randoms.has(taskId)) randoms.set(taskId, rng(SEED + Number(taskId.replace('flap-', ''))));
      const x = randoms.get(taskId)!();
      const act: Act = x < 0.35 ? 'ok' : x < 0.7 ? '503' : x < 0.85 ? 'timeout' : 'reset';
      acted.set(id, [...(acted.get(id) ?? []), act]);
      return ANSWER[act];
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

const seconds = (s: string) => Number(s.replace(/s$/, '')) * 1000;

it('a seeded flapping receiver: every job ends delivered or exhausted, ≤ 8 attempts, spaced by the schedule', async () => {
  const key = env.BOOTSTRAP_API_KEY!;
  const ids: string[] = [];
  for (let i = 0; i < JOBS; i++) {
    const taskId = `flap-${i}`;
    const c = await apiCall(api, key, 'POST', `/v1/tasks/${taskId}/pushNotificationConfigs`, {
      id: 'c',
      url: receiver.url,
    });
    expect(c.status).toBe(201);
    ids.push(await writeEventVia(api, key, taskId));
  }

  const jobs = await eventually(
    async () =>
      (
        await tdb.db.query<{ id: string; status: string; attempt_count: number }>(
          `SELECT id, status, attempt_count FROM delivery_jobs WHERE id = ANY($1::uuid[])`,
          [ids],
        )
      ).rows,
    (rows) =>
      rows.length === JOBS && rows.every((r) => !['queued', 'in_flight', 'waiting_retry'].includes(r.status)),
    300_000,
  );
  const attempts = (
    await tdb.db.query<{
      job_id: string;
      n: number;
      started: string;
      duration_ms: number;
      outcome: string;
      http_status: number | null;
      error: string | null;
    }>(
      `SELECT job_id, n, (extract(epoch FROM started_at) * 1000)::bigint AS started, duration_ms, outcome,
              http_status, error
         FROM delivery_attempts WHERE job_id = ANY($1::uuid[]) ORDER BY job_id, n`,
      [ids],
    )
  ).rows;

  // The waits the workflows chose, from their histories: the timer after attempt n, per job.
  const temporal = await connectDevServer();
  const timers = new Map<string, Map<number, number>>();
  try {
    for (const job of jobs) {
      const h = await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(job.id)).fetchHistory();
      const after = new Map<number, number>();
      for (const e of h.events ?? []) {
        const t = e.timerStartedEventAttributes?.startToFireTimeout;
        if (!t) continue;
        // A retry's timer says which attempt it follows ("attempt 3 of 8 (http_503), waiting 12 s");
        // a wait for a slot at a full target ("waiting for a slot at host H") is no retry and uses none.
        const data = e.userMetadata?.summary?.data;
        const summary = data ? (JSON.parse(Buffer.from(data).toString()) as string) : '';
        const m = /^attempt (\d+) of /.exec(summary);
        if (m) after.set(Number(m[1]), Number(t.seconds ?? 0) * 1000 + (t.nanos ?? 0) / 1e6);
      }
      timers.set(job.id, after);
    }
  } finally {
    await temporal.close();
  }

  const byStatus: Record<string, number> = {};
  let worstSlackMs = Infinity;
  for (const job of jobs) {
    byStatus[job.status] = (byStatus[job.status] ?? 0) + 1;
    const rows = attempts.filter((a) => a.job_id === job.id);
    const did = acted.get(job.id) ?? [];
    expect(rows.length).toBeLessThanOrEqual(MAX_ATTEMPTS);
    expect(rows.length).toBe(job.attempt_count);
    // One request per attempt, and each row says what the receiver did.
    expect(did).toHaveLength(rows.length);
    rows.forEach((row, i) => {
      expect(row.n).toBe(i + 1);
      const act = did[i]!;
      if (act === 'ok') expect(row).toMatchObject({ outcome: 'delivered', http_status: 200 });
      else if (act === '503') expect(row).toMatchObject({ outcome: 'retry', http_status: 503 });
      else if (act === 'timeout')
        expect(row).toMatchObject({ outcome: 'retry', http_status: null, error: 'timeout' });
      else expect(row).toMatchObject({ outcome: 'retry', http_status: null, error: 'connection' });
    });
    // The contract's statuses for this receiver: delivered at the first 200, or exhausted after 8 failures.
    if (did.includes('ok')) {
      expect(job.status).toBe('delivered');
      expect(did.indexOf('ok')).toBe(rows.length - 1);
    } else {
      expect(job.status).toBe('exhausted');
      expect(rows).toHaveLength(MAX_ATTEMPTS);
    }
    // Spacing. The wait the workflow chose after attempt n is in the jitter band of the schedule (its
    // timer, read from the history: no clock involved); and attempt n+1 started no sooner than the
    // band's lower bound after attempt n ended (a timer never fires early, whatever the load).
    const chosen = timers.get(job.id)!;
    expect([...chosen.keys()]).toEqual(rows.slice(0, -1).map((r) => r.n));
    for (let i = 1; i < rows.length; i++) {
      const prev = rows[i - 1]!;
      const n = prev.n;
      const d = Math.min(
        seconds(FAST.RETRY_MAX),
        seconds(FAST.RETRY_INITIAL) * Number(FAST.RETRY_FACTOR) ** (n - 1),
      );
      const timer = chosen.get(n)!;
      // 1 ms for the rounding of the jittered delay to whole milliseconds.
      expect(timer).toBeGreaterThanOrEqual(0.8 * d - 1);
      expect(timer).toBeLessThanOrEqual(1.2 * d + 1);
      const waited = Number(rows[i]!.started) - (Number(prev.started) + prev.duration_ms);
      // 5 ms for the rounding of timestamps and durations to whole milliseconds.
      expect(waited).toBeGreaterThanOrEqual(0.8 * d - 5);
      worstSlackMs = Math.min(worstSlackMs, waited - 0.8 * d);
    }
  }
  expect(Object.values(byStatus).reduce((a, b) => a + b, 0)).toBe(JOBS);
  const answers = [...acted.values()].flat();
  const count = (a: Act) => answers.filter((x) => x === a).length;
  // The seed exercises every kind of answer.
  for (const a of ['ok', '503', 'timeout', 'reset'] as const) expect(count(a)).toBeGreaterThan(0);
  process.stdout.write(
    `flapping: ${JOBS} jobs ${JSON.stringify(byStatus)}, ${attempts.length} attempts ` +
      `(200 ${count('ok')}, 503 ${count('503')}, timeout ${count('timeout')}, reset ${count('reset')}), ` +
      `max attempts ${Math.max(...jobs.map((j) => j.attempt_count))}, ` +
      `tightest wait ${Math.round(worstSlackMs)} ms above the jitter band's lower bound\n`,
  );
});
