/**
 * The dispatcher's two paths (src/api/dispatcher.ts): an idle write's jobs are started directly after
 * the commit, under a short lease that keeps claim runs off them; a direct start that fails releases its
 * lease at once and sends later writes to the claim run. Real Postgres, the dev server, and, for the
 * failure, a Temporal address where nothing listens.
 */
import crypto from 'node:crypto';
import {
  Client,
  Connection,
  defaultGrpcRetryOptions,
  makeGrpcRetryInterceptor,
  WorkflowNotFoundError,
} from '@temporalio/client';
import { heldCount, queuedCount } from '../../src/api/dispatcher';
import { KnownTargets } from '../../src/api/known-targets';
import { DEFAULT_SLOT_SETTINGS } from '../../src/db/slots';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { lineWakes } from '../../src/metrics';
import { jobsToStart, writeEvent as writeOutbox } from '../../src/db/outbox';
import { startDeliveryWorkflow } from '../../src/temporal';
import { freePort } from '../helpers/test-services-port';
import {
  attemptCalls,
  connectDevServer,
  createConfig,
  deliveryResult,
  eventually,
  jobRow,
  sideDispatcher,
  startStack,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

jest.setTimeout(60_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let receiver: Receiver;
const queue = `dispatch-it-${crypto.randomBytes(4).toString('hex')}`;
const status = (taskId: string) => ({ statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } } });

beforeAll(async () => {
  temporal = await connectDevServer();
  receiver = await startReceiver();
  // No sweep during the tests: whatever starts a job here is the path under test.
  stack = await startStack(temporal, queue, { env: { SWEEP_INTERVAL: '1h' } });
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
  await temporal?.close();
});

const leaseOf = async (jobId: string) =>
  (
    await stack.tdb.db.query<{ leased: boolean; dispatched: boolean }>(
      `SELECT dispatch_lease > now() AS leased, dispatched_at IS NOT NULL AS dispatched
         FROM delivery_jobs WHERE id = $1`,
      [jobId],
    )
  ).rows[0]!;

/** Waits for a job to be delivered (the test fails if it is not within the time). */
const delivered = (jobId: string, timeoutMs?: number) =>
  eventually(
    async () => (await jobRow(stack, jobId)).status,
    (s) => s === 'delivered',
    timeoutMs,
  );

/**
 * The lag gauge (a2a_push_outbox_queued) once started jobs are marked: their marks are written after
 * their starts return, which on a real cluster can come after held jobs were held back.
 */
/** The worker's line wakes so far (a2a_push_line_wakes_total), by how. */
const lineWakesBy = async () => {
  const by = { eager: 0, started: 0, tenant_full: 0, signal: 0 };
  for (const v of (await lineWakes.get()).values) by[v.labels.how as keyof typeof by] += v.value;
  return by;
};

const lagDrained = () =>
  eventually(
    () => queuedCount(stack.tdb.db),
    (n) => n === 0,
    3_000,
  );

/** When a job's delivery workflow started (epoch ms). */
const startTimeOf = async (jobId: string) =>
  (await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(jobId)).describe()).startTime.getTime();

/** Which targets answered lately, for a side dispatcher's slow lane. */
const knownTargets = () => new KnownTargets(stack.tdb.db, { knownMs: DEFAULT_SLOT_SETTINGS.knownMs });

/**
 * A receiver that holds every answer (200) until `release`: no 2xx meanwhile, so its target stays
 * unknown and its held-back jobs keep their turns (a 2xx would release them).
 */
const gatedReceiver = async () => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  return { rx: await startReceiver({ script: () => ({ status: 200, gate }) }), release };
};

/** The writer died before starting these jobs: their lease has run out, and a claim run may take them. */
const leaseRunsOut = (jobIds: string[]) =>
  stack.tdb.db.query(
    `UPDATE delivery_jobs SET dispatch_lease = now() - interval '1 second' WHERE id = ANY($1::uuid[])`,
    [jobIds],
  );

/** An event written straight to the outbox with its jobs leased, as the API does for a direct start. */
const writeLeased = (taskId: string, leaseMs: number, ordered = false) =>
  writeOutbox(stack.tdb.db, {
    ordered,
    tenantId: 'tenant-a',
    taskId,
    kind: 'statusUpdate',
    body: JSON.stringify(status(taskId)),
    deadlineMs: 60_000,
    boundPerConfig: 100,
    leaseMs,
  });

it('an idle write starts its own jobs: delivered without any claim run', async () => {
  const taskId = `direct-${crypto.randomUUID()}`;
  await createConfig(stack, taskId, { id: 'c1', url: receiver.url });
  await createConfig(stack, taskId, { id: 'c2', url: receiver.url });
  const claims = jest.spyOn(stack.dispatcher, 'runOnce');
  try {
    const w = await writeEvent(stack, taskId, status(taskId));
    expect(w.deliveries).toHaveLength(2);
    for (const d of w.deliveries) await delivered(d.id);
    for (const d of w.deliveries) expect(await leaseOf(d.id)).toEqual({ leased: null, dispatched: true });
    expect(claims).not.toHaveBeenCalled();
  } finally {
    claims.mockRestore();
  }
});

it('a claim run skips a job leased for a direct start, and takes it once the lease is gone', async () => {
  const taskId = `leased-${crypto.randomUUID()}`;
  await createConfig(stack, taskId, { id: 'c1', url: receiver.url });
  const w = await writeLeased(taskId, 30_000);
  const [job] = w.starts;
  expect(job).toMatchObject({ configId: 'c1', host: new URL(receiver.url).host });
  expect(await leaseOf(job!.id)).toEqual({ leased: true, dispatched: false });

  expect(await stack.dispatcher.runOnce()).toBe(0); // leased: not claimed, not started
  expect(await leaseOf(job!.id)).toEqual({ leased: true, dispatched: false });

  // The writer died before starting it: the lease runs out and the next claim run starts it.
  await leaseRunsOut([job!.id]);
  expect(await stack.dispatcher.runOnce()).toBe(1);
  await delivered(job!.id);
});

it('a direct start Temporal refuses releases the lease at once; writes then go to the claim run', async () => {
  // A Temporal where nothing listens, and no retries of the call: the start fails fast.
  const connection = Connection.lazy({
    address: `127.0.0.1:${await freePort()}`,
    interceptors: [makeGrpcRetryInterceptor(defaultGrpcRetryOptions({ maxAttempts: 1 }))],
  });
  const away = sideDispatcher(stack, new Client({ connection }), queue);
  try {
    const taskId = `refused-${crypto.randomUUID()}`;
    await createConfig(stack, taskId, { id: 'c1', url: receiver.url });
    expect(away.directLease('tenant-a')).toBe(away.directLeaseMs);
    const w = await writeLeased(taskId, away.directLeaseMs);
    const job = w.starts[0]!;
    away.startNow('tenant-a', taskId, w.starts);
    // Released well before the 5 s lease would have run out, and nothing was started.
    // (Read once: the stack's own dispatcher may claim the released job right after.)
    const released = await eventually(
      () => leaseOf(job.id),
      (l) => l.leased === null,
      3_000,
    );
    expect(released).toEqual({ leased: null, dispatched: false });
    expect(away.directLease('tenant-a')).toBeUndefined();
    // The failed start also kicked away's own claim run, which can claim the released job, fail to
    // start it and release it again: stopped here, its run has ended and left the job unleased (seen
    // on a loaded cluster run: the stack's claim run below found it still claimed by away's).
    await away.stop();

    // The service's own dispatcher (Temporal reachable) claims the released job and it is delivered.
    expect(await stack.dispatcher.runOnce()).toBe(1);
    await delivered(job.id);
  } finally {
    await away.stop();
    await connection.close().catch(() => undefined);
  }
});

it("one tenant's direct starts take at most its share: another tenant's write still starts directly", async () => {
  // 4 direct starts at a time, 2 per tenant.
  const d = sideDispatcher(stack, temporal.client, queue, { concurrency: 4 });
  try {
    expect(d.directPerTenant).toBe(2);
    const taskA = `share-a-${crypto.randomUUID()}`;
    await createConfig(stack, taskA, { id: 'c1', url: receiver.url });
    await createConfig(stack, taskA, { id: 'c2', url: receiver.url });
    expect(d.directLease('tenant-a')).toBe(d.directLeaseMs);
    const w = await writeLeased(taskA, d.directLeaseMs);
    expect(w.starts).toHaveLength(2);
    d.startNow('tenant-a', taskA, w.starts);
    // Its two starts are in flight (a start answers after at least one round trip to Temporal):
    // tenant-a's share is taken, the others' is not, and the total (4) is not reached.
    expect(d.directLease('tenant-a')).toBeUndefined();
    expect(d.directLease('tenant-b')).toBe(d.directLeaseMs);
    // Once they are started, tenant-a starts directly again.
    await eventually(
      async () => d.directLease('tenant-a'),
      (l) => l === d.directLeaseMs,
    );
    for (const s of w.starts) await delivered(s.id);
  } finally {
    await d.stop();
  }
});

it("a job to a target without a recent 2xx starts in the slow lane on both paths; a known target's job in the fast lane", async () => {
  const started = async (jobId: string) => {
    await delivered(jobId);
    // The run's end: under lean the attempt's marker is recorded after the job row says delivered.
    await deliveryResult(temporal.client, jobId);
    const events =
      (await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(jobId)).fetchHistory()).events ?? [];
    const input = events[0]!.workflowExecutionStartedEventAttributes!.input!.payloads![0]!.data!;
    return {
      input: JSON.parse(Buffer.from(input).toString()) as unknown,
      // Where its first attempt ran: an activity task queue, or `local` (the lean type's fast lane).
      queue: attemptCalls(events)[0]!.on,
    };
  };
  // The fast lane: the lean type's local activity (the default), the classic type's task queue.
  const fast = stack.rt.settings.DELIVERY_WORKFLOW === 'lean' ? 'local' : queue;
  const direct = await startReceiver();
  const claimed = await startReceiver();
  try {
    // Direct: a write to a receiver never seen before.
    const t1 = `lane-direct-${crypto.randomUUID()}`;
    await createConfig(stack, t1, { id: 'c', url: direct.url });
    const j1 = (await writeEvent(stack, t1, status(t1))).deliveries[0]!.id;
    expect(await started(j1)).toEqual({ input: { jobId: j1, lane: 'slow' }, queue: `${queue}-slow` });
    // It answered 2xx: the next job to it starts in the fast lane (no hint in its input).
    const j2 = (await writeEvent(stack, t1, status(t1))).deliveries[0]!.id;
    expect(await started(j2)).toEqual({ input: { jobId: j2 }, queue: fast });

    // The claim run: a job whose direct start was lost, to another receiver never seen before.
    const t2 = `lane-claim-${crypto.randomUUID()}`;
    await createConfig(stack, t2, { id: 'c', url: claimed.url });
    const j3 = (await writeLeased(t2, 30_000)).starts[0]!.id;
    await leaseRunsOut([j3]);
    expect(await stack.dispatcher.runOnce()).toBe(1);
    expect(await started(j3)).toEqual({ input: { jobId: j3, lane: 'slow' }, queue: `${queue}-slow` });
  } finally {
    await direct.close();
    await claimed.close();
  }
});

/**
 * For a line of held jobs: a receiver that holds its first POST until `release()`, and a side dispatcher
 * that starts one held job every 20 s (bursts of 1).
 */
const gatedLine = async () => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const rx = await startReceiver({
    script: (req) => (req.n === 1 ? { status: 200, gate } : { status: 200 }),
  });
  const d = sideDispatcher(stack, temporal.client, queue, { heldStartRate: 0.05 });
  return { rx, d, release };
};

it('held starts past HELD_START_RATE wait in the outbox; the wake of the job ahead starts them, on both paths, in order', async () => {
  // One every 20 s, bursts of 1: of a line's 5 held jobs, the first starts at once (in its start
  // delay), the other 4 get turns 20-80 s off. The line delivers in a few seconds, so each of those 4
  // is started by the wake of the job ahead of it, and marked dispatched by that worker.
  const lineOf = async (path: 'direct' | 'claim') => {
    const { rx, d, release } = await gatedLine();
    try {
      const taskId = `held-${path}-${crypto.randomUUID()}`;
      await createConfig(stack, taskId, { id: 'c1', url: rx.url });
      const ids: string[] = [];
      for (let i = 0; i < 6; i++) {
        const w = await writeLeased(taskId, path === 'direct' ? d.directLeaseMs : 30_000, true);
        expect(w.starts).toHaveLength(1);
        if (i > 0) expect(w.starts[0]!.behind).toBe(ids[i - 1]);
        ids.push(w.starts[0]!.id);
        if (path === 'direct') d.startNow('tenant-a', taskId, w.starts);
      }
      if (path === 'claim') {
        await leaseRunsOut(ids);
        expect(await d.runOnce()).toBe(6);
      }
      const [head, first, ...later] = ids as [string, string, ...string[]];
      const describe = (id: string) =>
        temporal.client.workflow.getHandle(makeDeliveryWorkflowId(id)).describe();
      // The head is on the wire (held there by the gate); the first held job started, in its delay.
      await rx.waitFor(1);
      expect((await describe(head)).status.name).toBe('RUNNING');
      await eventually(
        () => describe(first).then((x) => x.status.name),
        (st) => st === 'RUNNING',
        5_000,
      );
      // The other 4 wait in the outbox for turns 20 s and more off: no workflow, held back on purpose.
      const waiting = () =>
        stack.tdb.db
          .query<{ n: number }>(
            `SELECT count(*)::int AS n FROM delivery_jobs
              WHERE id = ANY($1::uuid[]) AND dispatched_at IS NULL AND start_after > now()`,
            [later],
          )
          .then((r) => r.rows[0]!.n);
      expect(await eventually(waiting, (n) => n === 4, 5_000)).toBe(4);
      for (const id of later) await expect(describe(id)).rejects.toBeInstanceOf(WorkflowNotFoundError);
      // Each held job counts once in a2a_push_outbox_held (held_by and start_after both say so), and
      // none as dispatcher lag.
      expect(await heldCount(stack.tdb.db)).toBe(5);
      expect(await lagDrained()).toBe(0);

      const wakesBefore = await lineWakesBy();
      release();
      await rx.waitFor(6, 15_000);
      // In order on the wire, each once.
      expect(rx.requests.map((r) => Number(r.headers['x-a2a-push-sequence']))).toEqual(
        [...rx.requests.map((r) => Number(r.headers['x-a2a-push-sequence']))].sort((a, b) => a - b),
      );
      expect(new Set(rx.requests.map((r) => r.headers['x-a2a-push-delivery']))).toEqual(new Set(ids));
      // All delivered, and the 4 dispatched by their wakes well before their turns (the claim run,
      // which would start them at their turns, has not run since).
      for (const id of ids) await delivered(id, 10_000);
      const marked = await stack.tdb.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM delivery_jobs
          WHERE id = ANY($1::uuid[]) AND dispatched_at < start_after - interval '5 seconds'`,
        [later],
      );
      expect(marked.rows[0]!.n).toBe(4);
      // Not started yet when woken, each of the 4 was started eagerly by that wake, on the worker that
      // ran the job ahead (EAGER_START on: no trip through matching, and no signal: its first attempt
      // reads the line). The first held job, in its start delay, was woken by a signal.
      const historyOf = async (id: string) =>
        (await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(id)).fetchHistory()).events ?? [];
      const signalled = (events: Awaited<ReturnType<typeof historyOf>>) =>
        events.some((e) => e.workflowExecutionSignaledEventAttributes);
      for (const id of later) {
        const events = await historyOf(id);
        expect(events[0]!.workflowExecutionStartedEventAttributes!.eagerExecutionAccepted).toBe(true);
        expect(signalled(events)).toBe(false);
      }
      expect(signalled(await historyOf(first))).toBe(true);
      expect((await lineWakesBy()).eager - wakesBefore.eager).toBe(4);
      expect((await lineWakesBy()).signal - wakesBefore.signal).toBeGreaterThanOrEqual(1);
    } finally {
      release();
      await d.stop();
      await rx.close();
    }
  };
  await lineOf('direct');
  await lineOf('claim');
});

it('a wake goes by signal-with-start when its tenant has its eager places in flight, and when the job it would start eagerly has started meanwhile', async () => {
  // A line of 3 (one held start every 20 s): the head on the wire (gated), the first held job started
  // in its delay, the last waiting in the outbox. Its wake (the first held job's end) would start it
  // eagerly; here it cannot.
  const lineOf = async (setUp: (ids: string[]) => Promise<void>, cleanUp: () => void) => {
    const { rx, d, release } = await gatedLine();
    try {
      const taskId = `held-wake-${crypto.randomUUID()}`;
      await createConfig(stack, taskId, { id: 'c1', url: rx.url });
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const w = await writeLeased(taskId, d.directLeaseMs, true);
        ids.push(w.starts[0]!.id);
        d.startNow('tenant-a', taskId, w.starts);
      }
      await rx.waitFor(1);
      await setUp(ids);
      const before = await lineWakesBy();
      release();
      await rx.waitFor(3, 15_000);
      for (const id of ids) await delivered(id, 10_000);
      const events =
        (await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(ids[2]!)).fetchHistory()).events ??
        [];
      return {
        eager: events[0]!.workflowExecutionStartedEventAttributes!.eagerExecutionAccepted ?? false,
        signalled: events.some((e) => e.workflowExecutionSignaledEventAttributes),
        wakes: await lineWakesBy().then((after) => ({
          eager: after.eager - before.eager,
          tenantFull: after.tenant_full - before.tenant_full,
          signal: after.signal - before.signal,
        })),
      };
    } finally {
      release();
      cleanUp();
      await d.stop();
      await rx.close();
    }
  };
  const places = stack.worker.eagerStarts!;

  // Tenant a's eager places are all taken (by runs elsewhere): the last job's wake is a
  // signal-with-start through the task queue, counted tenant_full.
  const held = Array.from({ length: places.perTenant }, () => `other-${crypto.randomUUID()}`);
  const full = await lineOf(
    async () => {
      for (const id of held) expect(places.take(id, 'tenant-a')).toBe(true);
    },
    () => held.forEach((id) => places.done(id)),
  );
  expect(full).toEqual({ eager: false, signalled: true, wakes: { eager: 0, tenantFull: 1, signal: 1 } });

  // The last job's workflow was started (in its start delay) but not yet marked dispatched when its
  // wake read the line: the eager start finds it started, and the signal-with-start wakes it at once
  // (its delay runs to its deadline, a minute off: delivered within seconds only because it was woken).
  const raced = await lineOf(
    async (ids) => {
      const [, , last] = ids as [string, string, string];
      const job = (await jobsToStart(stack.tdb.db, [last]))[0]!;
      expect(await startDeliveryWorkflow(temporal.client, queue, { ...job, behind: ids[1]! })).toBe(false);
      expect(await leaseOf(last)).toMatchObject({ dispatched: false });
    },
    () => undefined,
  );
  expect(raced).toEqual({ eager: false, signalled: true, wakes: { eager: 0, tenantFull: 0, signal: 2 } });
});

it('a held-back job whose job ahead ended before its write committed is woken, not left to its turn', async () => {
  // The job ahead's end read its line before this job's write committed, so it woke nobody. Here the
  // jobs ahead (E1, G1) end in the database and are never started. G2 takes the rate's one burst
  // start; E2 is held back to a turn 20 s off, then found behind an ended job and woken at once.
  const rx = await startReceiver();
  const d = sideDispatcher(stack, temporal.client, queue, { heldStartRate: 0.05 });
  const end = (ids: string[]) =>
    stack.tdb.db.query(
      `UPDATE delivery_jobs SET status = 'cancelled', finished_at = now() WHERE id = ANY($1::uuid[])`,
      [ids],
    );
  try {
    const line = async () => {
      const taskId = `held-race-${crypto.randomUUID()}`;
      await createConfig(stack, taskId, { id: 'c1', url: rx.url });
      const ahead = await writeLeased(taskId, 60_000, true);
      const held = await writeLeased(taskId, d.directLeaseMs, true);
      expect(held.starts[0]!.behind).toBe(ahead.starts[0]!.id);
      await end([ahead.starts[0]!.id]);
      return { taskId, ahead: ahead.starts[0]!.id, held };
    };
    const g = await line();
    const e = await line();
    d.startNow('tenant-a', g.taskId, g.held.starts);
    d.startNow('tenant-a', e.taskId, e.held.starts);
    const id = e.held.starts[0]!.id;
    await delivered(id, 10_000);
    // E2 waited for its turn (held back), and was started long before it.
    const r = await stack.tdb.db.query<{ early: boolean }>(
      `SELECT dispatched_at < start_after - interval '5 seconds' AS early FROM delivery_jobs WHERE id = $1`,
      [id],
    );
    expect(r.rows[0]!.early).toBe(true);
    // The starts of E1 and G1 were "lost": a claim run takes them, and their workflows end without an attempt.
    await leaseRunsOut([g.ahead, e.ahead]);
    expect(await d.runOnce()).toBe(2);
    expect(await queuedCount(stack.tdb.db)).toBe(0);
    await rx.waitFor(2);
  } finally {
    await d.stop();
    await rx.close();
  }
});

it("a tenant's slow-lane starts past SLOW_LANE_START_RATE wait for their turn, on both paths, and all are delivered", async () => {
  // 2 a second, bursts of 4: of 7 jobs to a receiver never seen before, 4 start at once and 3 wait.
  const limited = () =>
    sideDispatcher(stack, temporal.client, queue, {
      knownTargets: knownTargets(),
      slowStartRate: 2,
    });
  const rows = (ids: string[]) =>
    stack.tdb.db
      .query<{ id: string; waits: boolean; dispatched: boolean }>(
        `SELECT id, start_after > now() AS waits, dispatched_at IS NOT NULL AS dispatched
           FROM delivery_jobs WHERE id = ANY($1::uuid[]) ORDER BY id`,
        [ids],
      )
      .then((r) => r.rows);
  // The receivers hold every answer until after the last turn (gatedReceiver; a 2xx would release the
  // held-back jobs: the next test).
  const check = async (ids: string[], writtenAt: number, answer: () => void) => {
    // Right after: 3 wait for their turn (held back on purpose, not dispatcher lag), 4 are started.
    const held = await eventually(
      async () => (await rows(ids)).filter((r) => r.waits).length,
      (n) => n === 3,
      3_000,
    );
    expect(held).toBe(3);
    // The gauges: held back on purpose (a2a_push_outbox_held), not dispatcher lag (a2a_push_outbox_queued).
    expect(await heldCount(stack.tdb.db)).toBe(3);
    // The 4 started ones leave the lag gauge once their starts return and are marked (on a real
    // cluster that can come after the 3 were held back).
    expect(await lagDrained()).toBe(0);
    const waiting = (await rows(ids)).filter((r) => r.waits).map((r) => r.id);
    // Every job is delivered, the held ones started by the dispatcher at their turns, no sooner:
    // 0.5, 1 and 1.5 s after the burst.
    await new Promise((r) => setTimeout(r, Math.max(0, writtenAt + 1_800 - Date.now())));
    answer();
    for (const id of ids) await delivered(id, 15_000);
    const times = await Promise.all(waiting.map(startTimeOf));
    times.sort((a, b) => a - b);
    expect(times[0]! - writtenAt).toBeGreaterThanOrEqual(400);
    expect(times[2]! - writtenAt).toBeGreaterThanOrEqual(1_400);
    expect((await rows(ids)).every((r) => r.dispatched)).toBe(true);
  };

  const { rx: direct, release: answerDirect } = await gatedReceiver();
  const { rx: claimed, release: answerClaimed } = await gatedReceiver();
  const d1 = limited();
  const d2 = limited();
  try {
    // Direct: one write fans out to 7 configs of a task, all to one new receiver.
    const t1 = `rate-direct-${crypto.randomUUID()}`;
    for (let i = 0; i < 7; i++) await createConfig(stack, t1, { id: `c${i}`, url: direct.url });
    const at1 = Date.now();
    const w1 = await writeLeased(t1, d1.directLeaseMs);
    expect(w1.starts).toHaveLength(7);
    d1.startNow('tenant-a', t1, w1.starts);
    await check(
      w1.starts.map((s) => s.id),
      at1,
      answerDirect,
    );
    expect(direct.requests).toHaveLength(7);

    // Claim: the same to another new receiver, started by a claim run.
    const t2 = `rate-claim-${crypto.randomUUID()}`;
    for (let i = 0; i < 7; i++) await createConfig(stack, t2, { id: `c${i}`, url: claimed.url });
    const w2 = await writeLeased(t2, 30_000);
    await leaseRunsOut(w2.starts.map((s) => s.id));
    const at2 = Date.now();
    expect(await d2.runOnce()).toBe(7);
    await check(
      w2.starts.map((s) => s.id),
      at2,
      answerClaimed,
    );
  } finally {
    answerDirect();
    answerClaimed();
    await d1.stop();
    await d2.stop();
    await direct.close();
    await claimed.close();
  }
});

it('slow-lane jobs held back for their turn start together once their target answers its first 2xx', async () => {
  // One start every 8 s, bursts of 1: of 4 jobs to a receiver never seen before, the first starts at
  // once (slow lane) and 3 get turns 8, 16 and 24 s off. The first one's 2xx makes the target known, so
  // the claim run at the first turn starts all 3: they are no longer first contacts.
  const rx = await startReceiver();
  const d = sideDispatcher(stack, temporal.client, queue, {
    knownTargets: knownTargets(),
    slowStartRate: 0.125,
  });
  try {
    const taskId = `rate-known-${crypto.randomUUID()}`;
    for (let i = 0; i < 4; i++) await createConfig(stack, taskId, { id: `c${i}`, url: rx.url });
    const at = Date.now();
    const w = await writeLeased(taskId, d.directLeaseMs);
    d.startNow('tenant-a', taskId, w.starts);
    const ids = w.starts.map((x) => x.id);
    for (const id of ids) await delivered(id, 20_000);
    const starts = await Promise.all(ids.map(async (id) => ({ id, at: (await startTimeOf(id)) - at })));
    starts.sort((a, b) => a.at - b.at);
    // The first at once; the other 3 held back until the first turn, then together (not at 16 and 24 s).
    expect(starts[0]!.at).toBeLessThan(4_000);
    for (const s of starts.slice(1)) {
      expect(s.at).toBeGreaterThanOrEqual(7_500);
      expect(s.at).toBeLessThan(12_000);
    }
    expect(rx.requests).toHaveLength(4);
  } finally {
    await d.stop();
    await rx.close();
  }
});

/**
 * The stack's pool with a hook in front of each query: the hook may hold a statement back or fail it
 * before it reaches the (real) database. Fault injection for the dispatcher's timing and failure paths.
 */
const poolWith = (hook: (query: unknown) => Promise<void>) =>
  new Proxy(stack.tdb.db, {
    get(target, prop) {
      if (prop === 'query')
        return async (query: unknown, ...rest: unknown[]) => {
          await hook(query);
          return (target.query as (...a: unknown[]) => Promise<unknown>)(query, ...rest);
        };
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
const statementName = (query: unknown) =>
  typeof query === 'object' && query !== null ? (query as { name?: string }).name : undefined;
/** Whether a query is the claim run's claim statement (sent as text, not named). */
const isClaim = (query: unknown) =>
  typeof query === 'string' && query.trimStart().startsWith('WITH RECURSIVE tenants');

it('held-back jobs are kicked from when their turns were written: a turns statement 400 ms late in the pool still starts each at its turn', async () => {
  // As the SLOW_LANE_START_RATE test (2 a second, bursts of 4; 3 of 7 wait), but the statement writing
  // the turns reaches the database 400 ms after the dispatcher read its clock, as under load. The
  // database sets each turn from its own clock then: 400 ms later than the dispatcher's `now`. A kick
  // timed from that `now` finds its job not yet due, and the last one of the burst is never kicked
  // (no sweep here).
  const { rx, release } = await gatedReceiver();
  let delayed = 0;
  const d = sideDispatcher(stack, temporal.client, queue, {
    db: poolWith(async (q) => {
      if (statementName(q) !== 'dispatch.turns') return;
      delayed++;
      await new Promise((r) => setTimeout(r, 400));
    }),
    knownTargets: knownTargets(),
    slowStartRate: 2,
  });
  try {
    const taskId = `rate-late-${crypto.randomUUID()}`;
    for (let i = 0; i < 7; i++) await createConfig(stack, taskId, { id: `c${i}`, url: rx.url });
    const at = Date.now();
    const w = await writeLeased(taskId, d.directLeaseMs);
    const startedAt = Date.now();
    d.startNow('tenant-a', taskId, w.starts);
    const ids = w.starts.map((s) => s.id);
    // The receiver answers only after the last turn (0.4 + 1.5 s): no 2xx meanwhile releases the held
    // jobs early; each must be started by its own turn's kick.
    await new Promise((r) => setTimeout(r, at + 2_500 - Date.now()));
    release();
    for (const id of ids) await delivered(id, 10_000);
    expect(delayed).toBe(1);
    expect(rx.requests).toHaveLength(7);
    const starts = await Promise.all(ids.map(startTimeOf));
    starts.sort((a, b) => a - b);
    // 4 at once; 3 at their turns as the database set them: 0.9, 1.4 and 1.9 s after the write (the
    // last is what the old kick never started).
    expect(starts[3]! - startedAt).toBeLessThan(1_500);
    expect(starts[6]! - at).toBeGreaterThanOrEqual(1_800);
  } finally {
    release();
    await d.stop();
    await rx.close();
  }
});

it('a claim run that fails runs again a second later, not at the next sweep; kicks failing meanwhile leave one retry pending', async () => {
  // The claim statement fails (as a query error or the pool's connect timeout would) for the first
  // 1.8 s, during which the claim run is kicked 10 times; the sweep is an hour off. Each kick's run
  // fails; one retry comes a second after the first failure (not one per kick), fails too, and the
  // one after it, 2 s later, starts the job.
  let failing = true;
  let failed = 0;
  const d = sideDispatcher(stack, temporal.client, queue, {
    db: poolWith(async (q) => {
      if (failing && isClaim(q)) {
        failed++;
        throw new Error('injected: the claim statement failed');
      }
    }),
  });
  try {
    const taskId = `claim-retry-${crypto.randomUUID()}`;
    await createConfig(stack, taskId, { id: 'c1', url: receiver.url });
    const w = await writeLeased(taskId, 30_000);
    const id = w.starts[0]!.id;
    await leaseRunsOut([id]);
    const at = Date.now();
    for (let i = 0; i < 10; i++) {
      d.kick();
      // Past the failed run's microtasks: the next kick is a run of its own, not coalesced.
      await new Promise((r) => setImmediate(r));
    }
    const byKicks = failed;
    // All before the first retry is due.
    expect(Date.now() - at).toBeLessThan(900);
    await new Promise((r) => setTimeout(r, at + 1_800 - Date.now()));
    // The kicks' runs, and exactly one retry (a retry per failed kick would make 10 more).
    expect(byKicks).toBeGreaterThanOrEqual(1);
    expect(failed).toBe(byKicks + 1);
    failing = false;
    await delivered(id, 10_000);
    const started = await startTimeOf(id);
    // The second retry, 2 s after the first: the wait doubles, and is not lengthened by the kicks.
    expect(started - at).toBeGreaterThanOrEqual(2_800);
    expect(started - at).toBeLessThan(6_000);
  } finally {
    await d.stop();
  }
});

it('a held-back job whose turn could not be written is taken again when its lease runs out', async () => {
  // As the SLOW_LANE_START_RATE test (3 of 7 held back), with a 1 s direct lease, and the statement
  // writing the turns fails once. The 3 keep their lease and have no turn: a claim run kicked when the
  // lease runs out takes them (no sweep here), and all 7 are delivered.
  let failed = 0;
  const rx = await startReceiver();
  const d = sideDispatcher(stack, temporal.client, queue, {
    db: poolWith(async (q) => {
      if (failed === 0 && statementName(q) === 'dispatch.turns') {
        failed++;
        throw new Error('injected: writing the turns failed');
      }
    }),
    knownTargets: knownTargets(),
    slowStartRate: 2,
    directLeaseMs: 1_000,
  });
  try {
    const taskId = `turns-failed-${crypto.randomUUID()}`;
    for (let i = 0; i < 7; i++) await createConfig(stack, taskId, { id: `c${i}`, url: rx.url });
    const w = await writeLeased(taskId, d.directLeaseMs);
    d.startNow('tenant-a', taskId, w.starts);
    for (const s of w.starts) await delivered(s.id, 15_000);
    expect(failed).toBe(1);
    expect(rx.requests).toHaveLength(7);
  } finally {
    await d.stop();
    await rx.close();
  }
});

/**
 * A hook that fails the first `times` statements marking started jobs dispatched, and counts the claim
 * statements that reach the pool.
 */
const failingMarks = (times: number) => {
  const hook = {
    failed: 0,
    claims: 0,
    fn: async (q: unknown) => {
      if (isClaim(q)) hook.claims++;
      if (hook.failed < times && statementName(q) === 'outbox.dispatched') {
        hook.failed++;
        throw new Error('injected: marking started jobs dispatched failed');
      }
    },
  };
  return hook;
};

/**
 * A side dispatcher whose first mark of started jobs fails starts one job (`start`: by a claim run or
 * directly); the job must be marked by the mark's retry, with `claims` claim statements sent in all
 * (no claim run taking it again after its lease), and its receiver must see one request.
 */
const markedAgain = async (
  o: { leaseMs?: number; directLeaseMs?: number },
  start: (
    d: ReturnType<typeof sideDispatcher>,
    taskId: string,
    w: Awaited<ReturnType<typeof writeLeased>>,
  ) => Promise<void> | void,
  claims: number,
) => {
  const marks = failingMarks(1);
  const d = sideDispatcher(stack, temporal.client, queue, { db: poolWith(marks.fn), ...o });
  const rx = await startReceiver();
  try {
    const taskId = `mark-failed-${crypto.randomUUID()}`;
    await createConfig(stack, taskId, { id: 'c1', url: rx.url });
    const w = await writeLeased(taskId, d.directLeaseMs);
    const id = w.starts[0]!.id;
    await start(d, taskId, w);
    await delivered(id);
    await eventually(
      () => leaseOf(id),
      (l) => l.dispatched,
      10_000,
    );
    expect(marks.failed).toBe(1);
    expect(marks.claims).toBe(claims);
    expect(rx.requests).toHaveLength(1);
  } finally {
    await d.stop();
    await rx.close();
  }
};

it('a started job whose mark failed is marked again a second later, within its claim lease, and its delivery is not repeated', async () => {
  // The claim run starts the job, then marking it dispatched fails. Its workflow runs; the job keeps
  // its 4 s lease and no mark. The mark is written again a second later: no second claim run is
  // needed (the sweep is an hour off). Before, the failed mark failed the run, whose retry a second
  // later found the job still leased, and the job stayed unmarked until the sweep.
  await markedAgain(
    { leaseMs: 4_000 },
    async (d, _taskId, w) => {
      await leaseRunsOut(w.starts.map((x) => x.id));
      d.kick();
    },
    1,
  );
});

it('a direct start whose mark failed is marked again a second later, within its direct lease', async () => {
  // Nothing else marks it: the write went straight to the outbox (no api request kicks the stack's own
  // dispatcher), and the side dispatcher's claim run is not kicked (its start succeeded).
  await markedAgain({ directLeaseMs: 4_000 }, (d, taskId, w) => d.startNow('tenant-a', taskId, w.starts), 0);
});
