/**
 * The starts (src/starts): a committed job waits for its line or for admission, and its workflow is
 * started by the relay of the process whose statement made it due, or by any process's claim run. Real
 * Postgres, the dev server, HTTPS receivers on 127.0.0.1; relays as the processes run them.
 */
import crypto from 'node:crypto';
import {
  Client,
  Connection,
  defaultGrpcRetryOptions,
  makeGrpcRetryInterceptor,
  WorkflowNotFoundError,
  type WorkflowClientInterceptor,
} from '@temporalio/client';
import { Pool } from 'pg';
import { createApiKey } from '../../src/db/apikeys';
import { beginAttempt, endAttempt } from '../../src/db/attempts';
import { writeEvent as writeOutbox } from '../../src/db/outbox';
import type { DueJob } from '../../src/delivery/types';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { workflowStarts } from '../../src/metrics';
import { DELIVERY_WORKFLOW_TYPE } from '../../src/starts/client';
import { DIRECT_LEASE_MS } from '../../src/starts/relay';
import { freePort } from '../helpers/test-services-port';
import {
  connectDevServer,
  createConfig,
  eventually,
  jobRow,
  sideRelay,
  startStack,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

jest.setTimeout(90_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let receiver: Receiver;
const queue = `starts-it-${crypto.randomBytes(4).toString('hex')}`;
const status = (taskId: string) => ({ statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } } });

beforeAll(async () => {
  temporal = await connectDevServer();
  receiver = await startReceiver();
  // No sweep during these tests: whatever starts a job here is the path under test.
  stack = await startStack(temporal, queue, { env: { SWEEP_INTERVAL: '1h' } });
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
  await temporal?.close();
});

/** The relays' starts so far (a2a_push_starts_total), by path and by lane. */
const startsBy = async () => {
  const by = { direct: 0, claim: 0, fast: 0, slow: 0 };
  for (const v of (await workflowStarts.get()).values) {
    by[v.labels.path as 'direct' | 'claim'] += v.value;
    by[v.labels.lane as 'fast' | 'slow'] += v.value;
  }
  return by;
};

interface JobState {
  held_by: string | null;
  leased: boolean | null;
  lease_ends: Date | null;
  dispatched_at: Date | null;
  finished_at: Date | null;
  status: string;
}
const jobState = async (on: Stack, id: string) =>
  (
    await on.tdb.db.query<JobState>(
      `SELECT held_by, dispatch_lease > now() AS leased, dispatch_lease AS lease_ends, dispatched_at,
              finished_at, status
         FROM delivery_jobs WHERE id = $1`,
      [id],
    )
  ).rows[0]!;

const delivered = (on: Stack, jobId: string, timeoutMs?: number) =>
  eventually(
    async () => (await jobRow(on, jobId)).status,
    (s) => s === 'delivered',
    timeoutMs,
  );

const handle = (jobId: string) => temporal.client.workflow.getHandle(makeDeliveryWorkflowId(jobId));

/** An event written straight to the outbox (as the API's statement does). */
const writeStraight = (
  on: Stack,
  taskId: string,
  o: { leaseMs?: number; ordered?: boolean; tenantId?: string } = {},
) =>
  writeOutbox(on.tdb.db, {
    ordered: o.ordered ?? false,
    tenantId: o.tenantId ?? 'tenant-a',
    taskId,
    kind: 'statusUpdate',
    body: JSON.stringify(status(taskId)),
    deadlineMs: 600_000,
    boundPerConfig: 1000,
    leaseMs: o.leaseMs,
  });

/** A receiver that holds every answer (200) until `release`. */
const gatedReceiver = async () => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  return { rx: await startReceiver({ script: () => ({ status: 200, gate }) }), release };
};

it("an idle write's due jobs start in the writing process, with no claim run", async () => {
  const taskId = `direct-${crypto.randomUUID()}`;
  await createConfig(stack, taskId, { id: 'c1', url: receiver.url });
  await createConfig(stack, taskId, { id: 'c2', url: receiver.url });
  const before = await startsBy();
  const w = await writeEvent(stack, taskId, status(taskId));
  expect(w.deliveries).toHaveLength(2);
  for (const d of w.deliveries) await delivered(stack, d.id);
  for (const d of w.deliveries)
    expect(await jobState(stack, d.id)).toMatchObject({ held_by: null, leased: null, status: 'delivered' });
  const after = await startsBy();
  expect(after.direct - before.direct).toBe(2);
  expect(after.claim - before.claim).toBe(0);
});

it('a job made due without a lease is started by a relay told by NOTIFY (the sweep is an hour away)', async () => {
  const taskId = `notify-${crypto.randomUUID()}`;
  await createConfig(stack, taskId, { id: 'c1', url: receiver.url });
  const before = await startsBy();
  const w = await writeStraight(stack, taskId);
  expect(w.due.map((j) => j.id)).toEqual([w.jobs[0]!.id]);
  await delivered(stack, w.jobs[0]!.id);
  const after = await startsBy();
  expect(after.claim - before.claim).toBe(1);
  expect(after.direct - before.direct).toBe(0);
});

it('first contacts waiting for their turn start at once, in the fast lane, once their target has answered a 2xx', async () => {
  // 100 jobs to a receiver never seen: 20 start at once in the slow lane, 80 get turns over 8 s. The
  // first 2xx makes the target known: the next claim run drops the turns left and starts those jobs
  // as what they now are, jobs to a known target.
  const rx = await startReceiver();
  try {
    const taskId = `answered-${crypto.randomUUID()}`;
    await createConfig(stack, taskId, { id: 'c', url: rx.url });
    const ids: string[] = [];
    for (let i = 0; i < 100; i++)
      ids.push((await writeStraight(stack, taskId, { leaseMs: 600_000 })).jobs[0]!.id);
    const before = await startsBy();
    await stack.tdb.db.query('UPDATE delivery_jobs SET dispatch_lease = NULL WHERE id = ANY($1::uuid[])', [
      ids,
    ]);
    stack.relay.kick();
    for (const id of ids) await delivered(stack, id, 30_000);
    const after = await startsBy();
    expect(after.fast + after.slow - before.fast - before.slow).toBe(100);
    // The burst and the turns that came before the first 2xx: slow; the rest: fast, their turns dropped.
    expect(after.slow - before.slow).toBeGreaterThanOrEqual(20);
    expect(after.fast - before.fast).toBeGreaterThan(0);
  } finally {
    await rx.close();
  }
});

it('a start whose answer was lost is refused when a claim run starts the job again: marked started, one run, one delivery', async () => {
  const taskId = `lost-answer-${crypto.randomUUID()}`;
  await createConfig(stack, taskId, { id: 'c', url: receiver.url });
  // Leased to a relay that started it and died before its answer came: the run exists (delayed here, so
  // that it has not attempted yet), the job is not marked, and its lease runs out.
  const w = await writeStraight(stack, taskId, { leaseMs: 600_000 });
  const job = w.jobs[0]!.id;
  await temporal.client.workflow.start(DELIVERY_WORKFLOW_TYPE, {
    workflowId: makeDeliveryWorkflowId(job),
    taskQueue: queue,
    args: [{ jobId: job }],
    startDelay: '8 seconds',
  });
  const requestsBefore = receiver.requests.length;
  await stack.tdb.db.query('UPDATE delivery_jobs SET dispatch_lease = NULL WHERE id = $1', [job]);
  stack.relay.kick();
  // The claim run's start was refused (the run exists), and counted as started: marked before the
  // run's first workflow task.
  const marked = await eventually(
    () => jobState(stack, job),
    (j) => j.dispatched_at !== null,
  );
  await delivered(stack, job);
  const firstTask = ((await handle(job).fetchHistory()).events ?? []).find(
    (e) => e.workflowTaskScheduledEventAttributes,
  )!;
  expect(marked.dispatched_at!.getTime()).toBeLessThan(Number(firstTask.eventTime!.seconds) * 1000);
  // One run, completed (its last workflow task may follow the delivered row; visibility lags it).
  await handle(job).result();
  const runs = async () => {
    const names: string[] = [];
    for await (const r of temporal.client.workflow.list({
      query: `WorkflowId = '${makeDeliveryWorkflowId(job)}'`,
    }))
      names.push(r.status.name);
    return names;
  };
  expect(await eventually(runs, (names) => names.length === 1 && names[0] !== 'RUNNING')).toEqual([
    'COMPLETED',
  ]);
  expect(
    receiver.requests.slice(requestsBefore).filter((r) => r.headers['x-a2a-push-delivery'] === job),
  ).toHaveLength(1);
});

it('a start Temporal refuses gives its leases back at once; the statements after it leave their jobs to claim runs', async () => {
  // A Temporal where nothing listens, and no retries of the call: the start fails fast.
  const connection = Connection.lazy({
    address: `127.0.0.1:${await freePort()}`,
    interceptors: [makeGrpcRetryInterceptor(defaultGrpcRetryOptions({ maxAttempts: 1 }))],
  });
  const away = sideRelay(stack, new Client({ connection }), queue);
  try {
    const taskId = `refused-${crypto.randomUUID()}`;
    await createConfig(stack, taskId, { id: 'c1', url: receiver.url });
    expect(away.leaseMs('tenant-a')).toBe(DIRECT_LEASE_MS);
    const w = await writeStraight(stack, taskId, { leaseMs: DIRECT_LEASE_MS });
    const job = w.jobs[0]!;
    expect((await jobState(stack, job.id)).leased).toBe(true);
    away.take(w.due);
    // Given back, not left to run out, and nothing started. (Read once: the stack's relay, told by
    // nothing, does not take it; the test kicks it below.)
    const released = await eventually(
      () => jobState(stack, job.id),
      (j) => j.leased === null,
    );
    expect(released.dispatched_at).toBeNull();
    await expect(handle(job.id).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
    expect(away.leaseMs('tenant-a')).toBeUndefined();
    await away.stop();
    // A relay whose Temporal answers claims it, and it is delivered.
    stack.relay.kick();
    await delivered(stack, job.id);
  } finally {
    await away.stop();
    await connection.close().catch(() => undefined);
  }
});

it("a tenant's burst does not hold another tenant's job back: B's event is delivered while A's 60 wait on the wire", async () => {
  const a = await gatedReceiver();
  try {
    // A: 60 configs over 3 tasks, 3 events each (one line of 3 per config: 60 due jobs, 120 behind).
    const tasks = [0, 1, 2].map((i) => `burst-a${i}-${crypto.randomUUID()}`);
    for (const t of tasks)
      for (let c = 0; c < 20; c++) await createConfig(stack, t, { id: `c${c}`, url: a.rx.url });
    const aJobs: string[] = [];
    for (let e = 0; e < 3; e++)
      for (const t of tasks)
        aJobs.push(...(await writeEvent(stack, t, status(t))).deliveries.map((d) => d.id));
    // B: another tenant, another receiver, one event.
    const b = await createApiKey(stack.tdb.db, 'tenant-b');
    const bTask = `burst-b-${crypto.randomUUID()}`;
    const asB = (path: string, body: unknown) =>
      fetch(`${stack.apiUrl}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${b.key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect(
      (await asB(`/v1/tasks/${bTask}/pushNotificationConfigs`, { id: 'c', url: receiver.url })).status,
    ).toBe(201);
    const bw = await asB(`/v1/tasks/${bTask}/events`, { streamResponse: status(bTask) });
    const bJob = ((await bw.json()) as { deliveries: Array<{ id: string }> }).deliveries[0]!.id;
    await delivered(stack, bJob);
    // Not one of A's requests has been answered yet: B went past A's burst, not after it.
    expect(
      (
        await stack.tdb.db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM delivery_jobs WHERE id = ANY($1::uuid[]) AND status = 'delivered'`,
          [aJobs],
        )
      ).rows[0]!.n,
    ).toBe(0);
    a.release();
    for (const id of aJobs) await delivered(stack, id, 60_000);
  } finally {
    a.release();
    await a.rx.close();
  }
});

it('a write racing the end of the job ahead: the new job is made due by exactly one of the two statements, every time', async () => {
  // Two pools: two processes' connections, each statement in its own transaction.
  const writer = new Pool({ connectionString: stack.tdb.url, max: 2 });
  const ender = new Pool({ connectionString: stack.tdb.url, max: 2 });
  const made: string[] = [];
  try {
    for (let i = 0; i < 40; i++) {
      const taskId = `race-${i}-${crypto.randomUUID()}`;
      await createConfig(stack, taskId, { id: 'c', url: receiver.url });
      // The head, leased to nobody (no relay starts it), with its attempt on the wire.
      const head = await writeStraight(stack, taskId, { ordered: true, leaseMs: 600_000 });
      const headId = head.jobs[0]!.id;
      const configRow = (
        await stack.tdb.db.query<{ config_row_id: string }>(
          'SELECT config_row_id FROM delivery_jobs WHERE id = $1',
          [headId],
        )
      ).rows[0]!.config_row_id;
      const begun = await beginAttempt(
        stack.tdb.db,
        { job: headId, n: 1, nowMs: Date.now(), config: configRow, early: false },
        null,
      );
      expect(begun.o_started).toBe(true);
      const [w, end] = await Promise.all([
        writeOutbox(writer, {
          ordered: true,
          tenantId: 'tenant-a',
          taskId,
          kind: 'statusUpdate',
          body: JSON.stringify(status(taskId)),
          deadlineMs: 600_000,
          boundPerConfig: 1000,
          leaseMs: 600_000,
        }),
        endAttempt(
          ender,
          {
            job: headId,
            n: 1,
            config: configRow,
            nowMs: Date.now(),
            durationMs: 1,
            outcome: 'delivered',
            httpStatus: 200,
            error: null,
            retryAfterMs: null,
            status: 'delivered',
            reason: 'http_200',
            final: true,
            waitMs: null,
            configStatus: null,
            leaseMs: 600_000,
          },
          null,
        ),
      ]);
      const next = w.jobs[0]!.id;
      made.push(headId, next);
      const byWrite = w.due.some((j: DueJob) => j.id === next);
      const byEnd = end.o_due.some((j) => j.id === next);
      expect([byWrite, byEnd].filter(Boolean)).toHaveLength(1);
      expect((await jobState(stack, next)).held_by).toBeNull();
    }
  } finally {
    // Leased to nobody: they go before a relay could take them.
    await stack.tdb.db.query('DELETE FROM delivery_jobs WHERE id = ANY($1::uuid[])', [made]);
    await writer.end();
    await ender.end();
  }
});

describe('a sweeping stack (SWEEP_INTERVAL 1 s)', () => {
  let sweeping: Stack;
  let dropped: DueJob[] = [];
  let dropNext = false;
  const swQueue = `${queue}-sweep`;
  beforeAll(async () => {
    sweeping = await startStack(temporal, swQueue, {
      env: { SWEEP_INTERVAL: '1s' },
      // The worker's process dies right after an attempt's end made the next job due and leased it to
      // that process: the jobs never reach its relay.
      handoff: (relay) => ({
        leaseMs: (tenant) => relay.leaseMs(tenant),
        take: (jobs) => {
          if (dropNext && jobs.length > 0) {
            dropNext = false;
            dropped = jobs;
            return;
          }
          relay.take(jobs);
        },
      }),
    });
  });
  afterAll(async () => {
    await sweeping?.close();
  });

  it('a line of 6 behind a held head: none of it has a workflow before the head ends; the next job, lost with its process, starts once its lease ran out; all in order', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const rx = await startReceiver({
      script: (req) => (req.n === 1 ? { status: 200, gate } : { status: 200 }),
    });
    try {
      const taskId = `line6-${crypto.randomUUID()}`;
      await createConfig(sweeping, taskId, { id: 'c', url: rx.url });
      const jobs: string[] = [];
      jobs.push((await writeEvent(sweeping, taskId, status(taskId))).deliveries[0]!.id);
      await rx.waitFor(1);
      for (let k = 2; k <= 6; k++)
        jobs.push((await writeEvent(sweeping, taskId, status(taskId))).deliveries[0]!.id);
      for (const id of jobs.slice(1)) {
        expect((await jobState(sweeping, id)).held_by).not.toBeNull();
        await expect(handle(id).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
      }
      dropNext = true;
      release();
      // The head's end made job 2 due and leased it to the process that died: no workflow until the
      // lease ran out, then the sweep's claim run started it.
      const lost = await eventually(
        async () => dropped,
        (d) => d.length > 0,
      );
      expect(lost.map((j) => j.id)).toEqual([jobs[1]]);
      const leased = await jobState(sweeping, jobs[1]!);
      expect(leased).toMatchObject({ held_by: null, dispatched_at: null });
      for (const id of jobs) await delivered(sweeping, id, 60_000);
      const started2 = (await handle(jobs[1]!).describe()).startTime.getTime();
      expect(started2).toBeGreaterThanOrEqual(leased.lease_ends!.getTime() - 1_000);
      // In order, each once, each started after the one ahead ended.
      expect(rx.requests.map((r) => r.headers['x-a2a-push-delivery'])).toEqual(jobs);
      for (let k = 1; k < jobs.length; k++) {
        const ahead = await jobState(sweeping, jobs[k - 1]!);
        const start = (await handle(jobs[k]!).describe()).startTime.getTime();
        expect(start).toBeGreaterThanOrEqual(ahead.finished_at!.getTime() - 1_000);
      }
    } finally {
      release();
      await rx.close();
    }
  });

  it('after an upgrade: a run of the previous version in its start delay is woken when its job becomes due; a job with a turn starts at its turn', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const rx = await startReceiver({
      script: (req) => (req.n === 1 ? { status: 200, gate } : { status: 200 }),
    });
    try {
      const taskId = `legacy-${crypto.randomUUID()}`;
      await createConfig(sweeping, taskId, { id: 'c', url: rx.url });
      const head = (await writeEvent(sweeping, taskId, status(taskId))).deliveries[0]!.id;
      await rx.waitFor(1);
      const held = (await writeEvent(sweeping, taskId, status(taskId))).deliveries[0]!.id;
      // As the previous version left it: started with a start delay of 5 minutes, and marked started.
      await temporal.client.workflow.start(DELIVERY_WORKFLOW_TYPE, {
        workflowId: makeDeliveryWorkflowId(held),
        taskQueue: swQueue,
        args: [{ jobId: held }],
        startDelay: '5 minutes',
      });
      await sweeping.tdb.db.query('UPDATE delivery_jobs SET dispatched_at = now() WHERE id = $1', [held]);
      release();
      await delivered(sweeping, held, 30_000);
      // Woken, not waiting out its delay: a signal-with-start `wake` came before its first workflow task.
      const events = (await handle(held).fetchHistory()).events ?? [];
      const wakeAt = events.findIndex(
        (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'wake',
      );
      expect(wakeAt).toBeGreaterThan(0);
      expect(wakeAt).toBeLessThan(events.findIndex((e) => e.workflowTaskScheduledEventAttributes));
      expect((await jobState(sweeping, head)).status).toBe('delivered');

      // A job the previous version held back for a turn (start_after, unleased): due, started at its turn.
      const other = `legacy-turn-${crypto.randomUUID()}`;
      await createConfig(sweeping, other, { id: 'c', url: rx.url });
      const w = await writeStraight(sweeping, other, { leaseMs: 600_000 });
      const turned = w.jobs[0]!.id;
      const turn = (
        await sweeping.tdb.db.query<{ turn: Date }>(
          `UPDATE delivery_jobs SET start_after = now() + interval '2 seconds', dispatch_lease = NULL
            WHERE id = $1 RETURNING start_after AS turn`,
          [turned],
        )
      ).rows[0]!.turn;
      await delivered(sweeping, turned, 30_000);
      expect((await handle(turned).describe()).startTime.getTime()).toBeGreaterThanOrEqual(
        turn.getTime() - 1_000,
      );
    } finally {
      release();
      await rx.close();
    }
  });
});

it("two processes share one first-contact rate: a second relay's first contacts take turns after the first relay's, not a burst of their own", async () => {
  const own = await startStack(temporal, `${queue}-rate`, { env: { SWEEP_INTERVAL: '1h' } });
  const dead = await gatedReceiver();
  const pools = [0, 1].map(() =>
    new Pool({ connectionString: own.tdb.url, max: 4 }).on('error', () => undefined),
  );
  const startsOf = [0, 0];
  const counting = (i: number): WorkflowClientInterceptor => ({
    async start(input, next) {
      startsOf[i]!++;
      return next(input);
    },
  });
  // Two processes' relays: each its own pool and Temporal client; they share only Postgres.
  const relays = [0, 1].map((i) =>
    sideRelay(
      own,
      new Client({ connection: temporal.client.connection, interceptors: { workflow: [counting(i)] } }),
      `${queue}-rate`,
      { db: pools[i]! },
    ),
  );
  const rowsOf = async (ids: string[]) =>
    (
      await own.tdb.db.query<{ id: string; start_after: Date | null; dispatched_at: Date | null }>(
        'SELECT id, start_after, dispatched_at FROM delivery_jobs WHERE id = ANY($1::uuid[])',
        [ids],
      )
    ).rows;
  const holder = await own.tdb.db.connect();
  try {
    // This stack's own relay is not one of the two.
    await own.relay.stop();
    const taskId = `rate-${crypto.randomUUID()}`;
    await createConfig(own, taskId, { id: 'c', url: dead.rx.url });
    // 60 first contacts (a target that never answered), unordered, written leased to nobody (no NOTIFY).
    const ids: string[] = [];
    for (let i = 0; i < 60; i++)
      ids.push((await writeStraight(own, taskId, { leaseMs: 600_000 })).jobs[0]!.id);
    const [first, second] = [ids.slice(0, 30), ids.slice(30)];
    await own.tdb.db.query('UPDATE delivery_jobs SET dispatch_lease = NULL WHERE id = ANY($1::uuid[])', [
      ids,
    ]);
    // The first relay claims 30 (the other 30 held by this transaction: its claim skips them).
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM delivery_jobs WHERE id = ANY($1::uuid[]) FOR UPDATE', [second]);
    relays[0]!.kick();
    await eventually(
      () => rowsOf(first),
      (rs) => rs.every((r) => r.dispatched_at !== null || r.start_after !== null),
      20_000,
    );
    // The first relay's process goes (its turns' claim runs with it); at once, the second relay claims
    // the other 30 for the same tenant, and the first relay's turns as they come.
    await relays[0]!.stop();
    await holder.query('COMMIT');
    relays[1]!.kick();
    const rows = await eventually(
      () => rowsOf(ids),
      (rs) => rs.every((r) => r.dispatched_at !== null),
      30_000,
    );
    expect(startsOf[0]! + startsOf[1]!).toBe(60);
    expect(startsOf.every((n) => n > 0)).toBe(true);
    const turnOf = new Map(rows.map((r) => [r.id, r.start_after?.getTime()]));
    const turns = (set: string[]) =>
      set.map((id) => turnOf.get(id)).filter((t): t is number => t !== undefined);
    // The first took its burst (20 at once) and gave 10 turns; the second's turns come after those: it
    // has no burst of its own (a rate per process would start 20 of its 30 at once).
    expect(turns(first)).toHaveLength(10);
    expect(turns(second).length).toBeGreaterThan(20);
    expect(Math.min(...turns(second))).toBeGreaterThan(Math.max(...turns(first)));
    // 100 ms apart (the turns are rounded up to a millisecond), and none started before its turn.
    const all = [...turns(first), ...turns(second)].sort((x, y) => x - y);
    for (let k = 1; k < all.length; k++) expect(all[k]! - all[k - 1]!).toBeGreaterThanOrEqual(99);
    for (const r of rows)
      if (r.start_after) expect(r.dispatched_at!.getTime()).toBeGreaterThanOrEqual(r.start_after.getTime());
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
    for (const r of relays) await r.stop();
    for (const p of pools) await p.end();
    dead.release();
    await own.close();
    await dead.rx.close();
  }
});
