/**
 * Ordered delivery (issue 20, contract §10) end to end: the API, the dispatcher, the worker on the dev
 * server, Postgres, and scripted HTTPS receivers on 127.0.0.1. A config's pushes reach its receiver in
 * event order (`X-A2A-Push-Sequence`); a job waits for the earlier ones of its config; the end of one
 * wakes the next; a new event wakes a head in backoff once; deadline, bound, delete, pause, stop and
 * `:retry` keep their rules; DELIVERY_ORDER=none turns the wait off.
 *
 * How the tests wait: retry waits are 10 minutes wherever an outcome must come from a wake (a job that
 * ends at all within the test's poll ended by a wake, not a timer), and the receiver holds a request
 * on the wire (`gate`) wherever a job must still be unfinished when the test looks.
 */
import crypto from 'node:crypto';
import { loadSettings } from '../../src/config';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { startApi, type Service } from '../../src/services';
import { WorkflowNotFoundError } from '@temporalio/client';
import {
  configRow,
  connectDevServer,
  createConfig,
  eventually,
  json,
  startStack,
  writeEvent,
  type Json,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type ReceivedRequest, type Receiver, type ScriptedAnswer } from '../helpers/receiver';
import { freePort } from '../helpers/test-services-port';

jest.setTimeout(120_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
const receivers: Receiver[] = [];
const queue = `order-it-${crypto.randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  temporal = await connectDevServer();
});
afterAll(async () => {
  for (const r of receivers) await r.close();
  await temporal?.close();
});

/** A stack of its own (database, API, worker, task queue) for one describe block, closed after it. */
function stackFor(name: string, env: Record<string, string>) {
  const s: { stack: Stack } = { stack: undefined as unknown as Stack };
  beforeAll(async () => {
    s.stack = await startStack(temporal, `${queue}-${name}`, { env });
  });
  afterAll(async () => {
    await s.stack?.close();
  });
  return s;
}

async function receiver(): Promise<Receiver> {
  const r = await startReceiver();
  receivers.push(r);
  return r;
}

const seqOf = (r: ReceivedRequest) => Number(r.headers['x-a2a-push-sequence']);
const idOf = (r: ReceivedRequest) => r.headers['x-a2a-push-delivery'] as string;
/** The event number each test writes into its event's body, read back from a push. */
const markOf = (r: ReceivedRequest) =>
  (JSON.parse(r.body.toString('utf8')) as { statusUpdate: { metadata: { k: number } } }).statusUpdate.metadata
    .k;

/** Answers by the push's sequence number: the listed answers in turn, then 200. */
function answerBySequence(r: Receiver, script: Record<number, ScriptedAnswer[]>): void {
  const seen = new Map<number, number>();
  r.setScript((req) => {
    const n = seqOf(req);
    const i = seen.get(n) ?? 0;
    seen.set(n, i + 1);
    return script[n]?.[i] ?? { status: 200 };
  });
}

/** A request held on the wire until the test calls `release`, then answered `status`. */
function held(status: number) {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  return { answer: { status, gate } as ScriptedAnswer, release };
}

/** Event k of a task: a status update whose metadata carries k, so a push shows which event it is. */
async function event(stack: Stack, taskId: string, k: number) {
  return writeEvent(stack, taskId, {
    statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' }, metadata: { k } },
  });
}

/** Writes event k of a task with one config and answers the id of its delivery. */
async function eventJob(stack: Stack, taskId: string, k: number): Promise<string> {
  const ev = await event(stack, taskId, k);
  if (ev.deliveries.length !== 1)
    throw new Error(`event ${k} of ${taskId}: ${JSON.stringify(ev.deliveries)}`);
  return ev.deliveries[0]!.id;
}

const view = (stack: Stack, id: string): Promise<Json> => json(stack.api(`/v1/deliveries/${id}`));
/** The delivery's view once it has this status (polled; 20 s at most). */
const statusIs = (stack: Stack, id: string, status: string) =>
  eventually(
    () => view(stack, id),
    (d) => d.status === status,
  );

/** The job row's order columns, as the activity left them. */
async function orderRow(stack: Stack, id: string) {
  const r = await stack.tdb.db.query<{
    status: string;
    attempt_count: number;
    held_by: string | null;
    wake_early: boolean;
    early_taken: boolean;
    ordered: boolean;
  }>(
    'SELECT status, attempt_count, held_by, wake_early, early_taken, ordered FROM delivery_jobs WHERE id = $1',
    [id],
  );
  return r.rows[0]!;
}

const UNFINISHED = ['queued', 'in_flight', 'waiting_retry'];

describe('FIFO per config (retries 2 s)', () => {
  const s = stackFor('fifo', { RETRY_INITIAL: '2s', RETRY_MAX: '2s' });

  it('later events wait queued behind a head in backoff, then arrive in event order with sequence 1..n', async () => {
    const { stack } = s;
    const r = await receiver();
    // The head: 503, 503, then a 200 that the test holds on the wire until it has looked at the line.
    const last = held(200);
    answerBySequence(r, { 1: [{ status: 503 }, { status: 503 }, last.answer] });
    await createConfig(stack, 'order-fifo', { id: 'c', url: r.url });
    const head = await eventJob(stack, 'order-fifo', 1);
    await eventually(
      () => orderRow(stack, head),
      (j) => j.status === 'waiting_retry' && j.attempt_count === 1,
    );

    // Written while the head is in backoff: queued, waiting for the head.
    const second = await eventJob(stack, 'order-fifo', 2);
    const v2 = await view(stack, second);
    expect(v2).toMatchObject({ status: 'queued', sequence: 2, waitingFor: head, attempts: [] });
    expect(UNFINISHED).toContain((await view(stack, head)).status);

    // The rest back to back: each waits for the one before it.
    const jobs = [head, second];
    for (let k = 3; k <= 5; k++) jobs.push(await eventJob(stack, 'order-fifo', k));
    for (let k = 3; k <= 5; k++)
      expect(await view(stack, jobs[k - 1]!)).toMatchObject({
        status: 'queued',
        sequence: k,
        waitingFor: jobs[k - 2],
      });

    // The head's third request (its 200) is on the wire; nothing of a later event went out before it.
    await r.waitFor(3, 20_000);
    expect(r.requests.map(seqOf)).toEqual([1, 1, 1]);
    // Not due: the later jobs are written waiting for their line (held_by), and have no workflow.
    expect((await orderRow(stack, second)).held_by).toBe(head);
    const heldWf = temporal.client.workflow.getHandle(makeDeliveryWorkflowId(jobs[4]!));
    await expect(heldWf.describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
    expect((await view(stack, jobs[4]!)).workflowId).toBeUndefined();
    last.release();

    for (const id of jobs) await statusIs(stack, id, 'delivered');
    const got = r.requests;
    expect(got.map(seqOf)).toEqual([1, 1, 1, 2, 3, 4, 5]);
    expect(got.map(markOf)).toEqual([1, 1, 1, 2, 3, 4, 5]);
    expect(got.slice(2).map(idOf)).toEqual(jobs);
    expect((await view(stack, head)).attempts.map((a: Json) => a.httpStatus)).toEqual([503, 503, 200]);
    for (const id of jobs.slice(1)) expect((await view(stack, id)).attempts).toHaveLength(1);
    // Delivered jobs hold nothing and wait for nothing.
    for (const id of jobs) expect((await view(stack, id)).waitingFor).toBeUndefined();
    const heldRows = await stack.tdb.db.query(
      `SELECT count(*)::int AS n FROM delivery_jobs WHERE held_by IS NOT NULL`,
    );
    expect(heldRows.rows[0].n).toBe(0);
  });

  it(':retry of a finished, undelivered job carries the original sequence and retryOf, and goes after the jobs already in line', async () => {
    const { stack } = s;
    const r = await receiver();
    const headDone = held(200);
    // Event 1: 500 (failed at once). Event 2: 503, then a 200 held on the wire. The resend of event 1: 200.
    answerBySequence(r, { 1: [{ status: 500 }], 2: [{ status: 503 }, headDone.answer] });
    await createConfig(stack, 'order-retry', { id: 'c', url: r.url });
    const failed = await eventJob(stack, 'order-retry', 1);
    await statusIs(stack, failed, 'failed');
    const head = await eventJob(stack, 'order-retry', 2);
    await eventually(
      () => orderRow(stack, head),
      (j) => j.status === 'waiting_retry',
    );
    const third = await eventJob(stack, 'order-retry', 3);

    const res = await stack.api(`/v1/deliveries/${failed}:retry`, { method: 'POST' });
    expect(res.status).toBe(201);
    const resend = (await res.json()) as Json;
    expect(resend).toMatchObject({ status: 'queued', sequence: 1, retryOf: failed });
    // At the end of the line: behind event 3, which is behind event 2.
    expect(await view(stack, resend.id)).toMatchObject({
      status: 'queued',
      sequence: 1,
      retryOf: failed,
      waitingFor: third,
    });
    expect(await view(stack, third)).toMatchObject({ status: 'queued', waitingFor: head });

    await r.waitFor(3, 20_000); // 500 for event 1, 503 and the held 200 for event 2
    headDone.release();
    for (const id of [head, third, resend.id]) await statusIs(stack, id, 'delivered');
    const got = r.requests;
    expect(got.map(seqOf)).toEqual([1, 2, 2, 3, 1]);
    expect(got.map(markOf)).toEqual([1, 2, 2, 3, 1]);
    expect(idOf(got[4]!)).toBe(resend.id);
    expect(await view(stack, failed)).toMatchObject({ status: 'failed', sequence: 1 });
  });
});

describe('a line in backoff (retries 10 min; 1 call per target)', () => {
  // One call per target: the gauge test shares a receiver between two configs to fill its slot; the
  // others have a receiver per config, with one request on the wire at a time.
  const s = stackFor('long', { RETRY_INITIAL: '10m', RETRY_MAX: '1h', OUTBOUND_HOST_CONCURRENCY: '1' });
  /** The production api process (src/services.ts) on this stack's database: its /metrics has the outbox gauges. */
  let api: Service & { port: number };
  beforeAll(async () => {
    const { stack } = s;
    const settings = loadSettings({
      LOG_LEVEL: 'silent',
      DATABASE_URL: stack.tdb.url,
      TEMPORAL_ADDRESS: process.env.TEST_TEMPORAL_ADDRESS!,
      TEMPORAL_NAMESPACE: process.env.TEST_TEMPORAL_NAMESPACE ?? 'default',
      TASK_QUEUE: `${queue}-long`,
      PUBLIC_BASE_URL: stack.inboxUrl,
      API_PORT: String(await freePort()),
    });
    api = await startApi({ ...stack.rt, settings });
  });
  afterAll(async () => {
    await api?.stop();
  });

  const heldGauge = async () => {
    const text = await (await fetch(`http://127.0.0.1:${api.port}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith('a2a_push_outbox_held'));
    if (!line) throw new Error('a2a_push_outbox_held is not in the api /metrics');
    return Number(line.split(' ').pop());
  };

  /**
   * Config `c` of `taskId`: event 1's job in backoff (its receiver answers `head.answer` to it, 503
   * until the test says otherwise), events 2 and 3 held behind it, each by the one before (as their own
   * workflows saw it), and its early attempt still to take: a line standing still. Events 2 and 3 are
   * written while the head's first request is on the wire, so they do not wake it (a head takes one
   * early attempt per wait).
   */
  async function lineInBackoff(taskId: string) {
    const { stack } = s;
    const r = await receiver();
    const first = held(503);
    const head: { answer: ScriptedAnswer } = { answer: first.answer };
    r.setScript((req) => (seqOf(req) === 1 ? head.answer : { status: 200 }));
    await createConfig(stack, taskId, { id: 'c', url: r.url });
    const jobs = [await eventJob(stack, taskId, 1)];
    await r.waitFor(1, 20_000);
    jobs.push(await eventJob(stack, taskId, 2), await eventJob(stack, taskId, 3));
    for (const i of [1, 2])
      await eventually(
        () => orderRow(stack, jobs[i]!),
        (j) => j.status === 'queued' && j.held_by === jobs[i - 1],
      );
    head.answer = { status: 503 };
    first.release();
    await eventually(
      () => orderRow(stack, jobs[0]!),
      (j) => j.status === 'waiting_retry' && !j.wake_early && !j.early_taken,
    );
    return { r, head, jobs };
  }

  it('a head takes one early attempt per wait: a second event in the same wait does not wake it again', async () => {
    const { stack } = s;
    const taskId = 'order-once';
    const { r, jobs } = await lineInBackoff(taskId);
    expect(r.requests).toHaveLength(1);
    // Event 4 wakes the head: its early attempt gets 503 again, and it waits for its next step.
    jobs.push(await eventJob(stack, taskId, 4));
    await r.waitFor(2, 20_000);
    await eventually(
      () => orderRow(stack, jobs[0]!),
      (j) => j.status === 'waiting_retry' && j.attempt_count === 2 && j.early_taken,
    );
    // Event 5 finds the head's early attempt of this wait spent: no wake, no attempt.
    jobs.push(await eventJob(stack, taskId, 5));
    expect(await orderRow(stack, jobs[0]!)).toMatchObject({ wake_early: false, early_taken: true });
    await eventually(
      () => orderRow(stack, jobs[4]!),
      (j) => j.held_by === jobs[3],
    );
    expect(r.requests).toHaveLength(2);
    expect((await view(stack, jobs[0]!)).attempts).toHaveLength(2);
    // Leaves no held line behind (the gauge tests of this stack count exactly).
    expect(
      (await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs/c`, { method: 'DELETE' })).status,
    ).toBe(204);
    for (const id of jobs) await statusIs(stack, id, 'cancelled');
  });

  it('two configs of one task: one in backoff holds only its own line; the other delivers every event in order meanwhile', async () => {
    const { stack } = s;
    const down = await receiver();
    const up = await receiver();
    down.setScript(() => ({ status: 503 }));
    await createConfig(stack, 'order-two', { id: 'down', url: down.url });
    await createConfig(stack, 'order-two', { id: 'up', url: up.url });
    const evs = [await event(stack, 'order-two', 1)];
    const of = (ev: (typeof evs)[number], configId: string) =>
      ev.deliveries.find((d) => d.configId === configId)!.id;
    await eventually(
      () => orderRow(stack, of(evs[0]!, 'down')),
      (j) => j.status === 'waiting_retry',
    );
    for (let k = 2; k <= 4; k++) evs.push(await event(stack, 'order-two', k));

    for (const ev of evs) await statusIs(stack, of(ev, 'up'), 'delivered');
    expect(up.requests.map(seqOf)).toEqual([1, 2, 3, 4]);
    expect(up.requests.map(markOf)).toEqual([1, 2, 3, 4]);
    // Meanwhile the other line has not moved: its head is still unfinished and nothing after it went out.
    expect(UNFINISHED).toContain((await view(stack, of(evs[0]!, 'down'))).status);
    for (let k = 1; k < 4; k++)
      expect(await view(stack, of(evs[k]!, 'down'))).toMatchObject({
        status: 'queued',
        sequence: k + 1,
        waitingFor: of(evs[k - 1]!, 'down'),
        attempts: [],
      });
    expect(new Set(down.requests.map(seqOf))).toEqual(new Set([1]));

    expect(
      (await stack.api('/v1/tasks/order-two/pushNotificationConfigs/down', { method: 'DELETE' })).status,
    ).toBe(204);
    for (const ev of evs) await statusIs(stack, of(ev, 'down'), 'cancelled');
  });

  it('deleting the config ends a waiting line at once: every job cancelled, the held ones without an attempt; a2a_push_outbox_held counts them meanwhile', async () => {
    const { stack } = s;
    const { r, jobs } = await lineInBackoff('order-del');
    expect(await eventually(heldGauge, (n) => n === 2)).toBe(2);
    expect(
      (await stack.api('/v1/tasks/order-del/pushNotificationConfigs/c', { method: 'DELETE' })).status,
    ).toBe(204);
    // Ended at all means woken: the head waits 10 min for its retry, the held ones recheck after 5 min.
    for (const id of jobs)
      expect(await statusIs(stack, id, 'cancelled')).toMatchObject({ reason: 'config_deleted' });
    for (const id of jobs.slice(1)) expect((await view(stack, id)).attempts).toEqual([]);
    expect(new Set(r.requests.map(seqOf))).toEqual(new Set([1]));
    expect(await eventually(heldGauge, (n) => n === 0)).toBe(0);
  });

  it('a2a_push_outbox_held counts a job while the line of its config holds it, not once it only waits for a slot at its target', async () => {
    const { stack } = s;
    const r = await receiver();
    const slotHolder = held(200);
    const other = held(200);
    // The first two requests are held on the wire until the test releases them.
    r.setScript((req) => (req.n === 1 ? slotHolder.answer : req.n === 2 ? other.answer : { status: 200 }));
    // Config b's first push takes the target's one slot and stays on the wire; b's second is held by it.
    await createConfig(stack, 'order-gauge-b', { id: 'c', url: r.url });
    await createConfig(stack, 'order-gauge-a', { id: 'c', url: r.url });
    const b1 = await eventJob(stack, 'order-gauge-b', 1);
    await r.waitFor(1, 20_000);
    const b2 = await eventJob(stack, 'order-gauge-b', 2);
    await eventually(
      () => orderRow(stack, b2),
      (j) => j.held_by === b1,
    );
    // Config a's push waits for the slot: in the target's line, not held by its own config.
    const a1 = await eventJob(stack, 'order-gauge-a', 1);
    const slotLine = async () =>
      (
        await stack.tdb.db.query<{ holder: string }>(
          'SELECT holder FROM outbound_waiters WHERE target = $1 ORDER BY seq',
          [`127.0.0.1:${r.port}`],
        )
      ).rows.map((w) => w.holder.split(':')[0]);
    await eventually(slotLine, (w) => w.length === 1 && w[0] === a1);
    expect(await eventually(heldGauge, (n) => n === 1)).toBe(1);

    // b1 ends: the freed slot is granted to a1, and b2, no longer held by its line, is woken. A healthy
    // target's grant is soft (migration 015): whichever of the two comes first takes the slot (held on
    // the wire), and the other waits in the target's line, held by no line.
    slotHolder.release();
    await statusIs(stack, b1, 'delivered');
    await r.waitFor(2, 20_000);
    const second = idOf(r.requests[1]!);
    expect([a1, b2]).toContain(second);
    const waiting = second === a1 ? b2 : a1;
    await eventually(slotLine, (w) => w.length === 1 && w[0] === waiting);
    expect(await view(stack, waiting)).toMatchObject({ status: 'queued', attempts: [] });
    expect((await view(stack, b2)).waitingFor).toBeUndefined();
    expect(await heldGauge()).toBe(0);

    other.release();
    for (const id of [a1, b2]) await statusIs(stack, id, 'delivered');
    expect(r.requests.map(idOf)).toEqual([b1, second, waiting]);
  });

  it.each([
    [401, 'auth_failed', 'http_401'],
    [404, 'stopped', 'http_404'],
  ])(
    'a %d for the head (woken by a new event) ends the waiting line %s without attempts',
    async (answer, status, reason) => {
      const { stack } = s;
      const taskId = `order-${answer}`;
      const { r, head, jobs } = await lineInBackoff(taskId);
      // The head's next request is held until event 4 is written (so the config is still active then),
      // and answered `answer`.
      const end = held(answer);
      head.answer = end.answer;
      // A new event wakes the head for one early attempt: the receiver's answer ends the config.
      jobs.push(await eventJob(stack, taskId, 4));
      expect(await view(stack, jobs[3]!)).toMatchObject({ status: 'queued', waitingFor: jobs[2] });
      end.release();
      expect(await statusIs(stack, jobs[0]!, status)).toMatchObject({ reason });
      expect(await configRow(stack, taskId, 'c')).toEqual({ status, status_reason: reason });
      for (const id of jobs.slice(1))
        expect(await statusIs(stack, id, status)).toMatchObject({ reason, attempts: [] });
      expect(r.requests.map(seqOf).every((n) => n === 1)).toBe(true);
    },
  );
});

describe('a new event wakes a head in backoff once (retries 10 min, at most 2 attempts)', () => {
  const s = stackFor('early', { RETRY_INITIAL: '10m', RETRY_MAX: '1h', DELIVERY_MAX_ATTEMPTS: '2' });

  it('the head delivers at once on a new event when its receiver is back, and the new event follows', async () => {
    const { stack } = s;
    const r = await receiver();
    answerBySequence(r, { 1: [{ status: 503 }] });
    await createConfig(stack, 'order-early', { id: 'c', url: r.url });
    const head = await eventJob(stack, 'order-early', 1);
    await eventually(
      () => orderRow(stack, head),
      (j) => j.status === 'waiting_retry',
    );
    expect(r.requests).toHaveLength(1);
    const next = await eventJob(stack, 'order-early', 2);
    // Delivered at all means the early attempt: the head's own wait is 10 minutes.
    const d = await statusIs(stack, head, 'delivered');
    expect(d.attempts.map((a: Json) => a.httpStatus)).toEqual([503, 200]);
    await statusIs(stack, next, 'delivered');
    expect(r.requests.map(seqOf)).toEqual([1, 1, 2]);
    expect(r.requests.map(markOf)).toEqual([1, 1, 2]);
  });

  it('the early attempt counts: a head at DELIVERY_MAX_ATTEMPTS ends exhausted, never tries again, and the line goes on', async () => {
    const { stack } = s;
    const r = await receiver();
    r.setScript((req) => (seqOf(req) === 1 ? { status: 503 } : { status: 200 }));
    await createConfig(stack, 'order-cap', { id: 'c', url: r.url });
    const head = await eventJob(stack, 'order-cap', 1);
    await eventually(
      () => orderRow(stack, head),
      (j) => j.status === 'waiting_retry',
    );
    const second = await eventJob(stack, 'order-cap', 2);
    expect(await statusIs(stack, head, 'exhausted')).toMatchObject({
      attempts: [
        { n: 1, httpStatus: 503 },
        { n: 2, httpStatus: 503 },
      ],
    });
    await statusIs(stack, second, 'delivered');
    const third = await eventJob(stack, 'order-cap', 3);
    await statusIs(stack, third, 'delivered');
    expect(r.requests.map(seqOf)).toEqual([1, 1, 2, 3]);
    expect((await view(stack, head)).attempts).toHaveLength(2);
  });
});

describe('the bound supersedes a waiting or sending head (bound 1, retries 10 min)', () => {
  const s = stackFor('bound', { RETRY_INITIAL: '10m', RETRY_MAX: '1h', OUTBOX_BOUND_PER_CONFIG: '1' });

  it('a head in backoff is superseded by the next event, which becomes the head and delivers at once', async () => {
    const { stack } = s;
    const r = await receiver();
    r.setScript((req) => (seqOf(req) === 1 ? { status: 503 } : { status: 200 }));
    await createConfig(stack, 'order-sup', { id: 'c', url: r.url });
    const head = await eventJob(stack, 'order-sup', 1);
    await eventually(
      () => orderRow(stack, head),
      (j) => j.status === 'waiting_retry',
    );
    const next = await eventJob(stack, 'order-sup', 2);
    expect(await statusIs(stack, head, 'superseded')).toMatchObject({ sequence: 1 });
    expect(await statusIs(stack, next, 'delivered')).toMatchObject({ sequence: 2 });
    // The receiver never acknowledged 1: what it has delivered starts at 2.
    expect(r.requests.map((q) => [seqOf(q), markOf(q)])).toEqual([
      [1, 1],
      [2, 2],
    ]);
    expect((await view(stack, head)).attempts).toHaveLength(1);
  });

  it('a head superseded mid-request still holds the line: the next POST starts only after its request returned; the gap shows', async () => {
    const { stack } = s;
    const r = await receiver();
    const first = held(503);
    answerBySequence(r, { 1: [first.answer] });
    await createConfig(stack, 'order-mid', { id: 'c', url: r.url });
    const head = await eventJob(stack, 'order-mid', 1);
    await r.waitFor(1, 20_000);
    // Two events while the head's request is on the wire: 2 supersedes the head, 3 supersedes 2.
    const second = await eventJob(stack, 'order-mid', 2);
    const third = await eventJob(stack, 'order-mid', 3);
    expect(await statusIs(stack, head, 'superseded')).toMatchObject({
      attempts: [{ n: 1 }],
    });
    expect(await statusIs(stack, second, 'superseded')).toMatchObject({ attempts: [] });
    // Event 3 waits for the head's request, though the head itself is final: not due, no workflow.
    expect(await view(stack, third)).toMatchObject({ status: 'queued', waitingFor: head });
    expect((await orderRow(stack, third)).held_by).not.toBeNull();
    expect((await view(stack, head)).finishedAt).toBeUndefined();
    expect(r.requests).toHaveLength(1);

    const releasedAt = Date.now();
    first.release();
    expect(await statusIs(stack, third, 'delivered')).toMatchObject({ sequence: 3 });
    expect(r.requests.map(seqOf)).toEqual([1, 3]);
    expect(r.requests.map(markOf)).toEqual([1, 3]);
    expect(r.requests[1]!.at).toBeGreaterThanOrEqual(releasedAt);
    // The superseded head's answer was recorded, and it stayed superseded.
    expect(await view(stack, head)).toMatchObject({
      status: 'superseded',
      attempts: [{ n: 1, httpStatus: 503 }],
    });
  });
});

describe('the deadline of a waiting job (DELIVERY_DEADLINE 6 s)', () => {
  // The sweep ends a job that waits for its line past its deadline: every second here.
  const s = stackFor('deadline', { DELIVERY_DEADLINE: '6s', DELIVERY_TIMEOUT: '30s', SWEEP_INTERVAL: '1s' });

  it('a job held past its deadline ends expired without an attempt, and the line goes on after it', async () => {
    const { stack } = s;
    const r = await receiver();
    const first = held(200);
    answerBySequence(r, { 1: [first.answer] });
    await createConfig(stack, 'order-exp', { id: 'c', url: r.url });
    const head = await eventJob(stack, 'order-exp', 1);
    await r.waitFor(1, 20_000);
    // Behind the head's request on the wire, until its deadline passes.
    const doomed = await eventJob(stack, 'order-exp', 2);
    expect(await view(stack, doomed)).toMatchObject({ status: 'queued', waitingFor: head });
    expect(await statusIs(stack, doomed, 'expired')).toMatchObject({ attempts: [] });
    const next = await eventJob(stack, 'order-exp', 3);
    expect(await view(stack, next)).toMatchObject({ status: 'queued', waitingFor: head });
    first.release();
    await statusIs(stack, head, 'delivered');
    await statusIs(stack, next, 'delivered');
    expect(r.requests.map(seqOf)).toEqual([1, 3]);
    expect(r.requests.map(markOf)).toEqual([1, 3]);
  });
});

describe('DELIVERY_ORDER=none (retries 10 min)', () => {
  const s = stackFor('none', { RETRY_INITIAL: '10m', RETRY_MAX: '1h', DELIVERY_ORDER: 'none' });

  it('later events do not wait for a head in backoff, nor wake it', async () => {
    const { stack } = s;
    const r = await receiver();
    r.setScript((req) => (seqOf(req) === 1 ? { status: 503 } : { status: 200 }));
    await createConfig(stack, 'order-none', { id: 'c', url: r.url });
    const head = await eventJob(stack, 'order-none', 1);
    await eventually(
      () => orderRow(stack, head),
      (j) => j.status === 'waiting_retry',
    );
    const later = [await eventJob(stack, 'order-none', 2), await eventJob(stack, 'order-none', 3)];
    for (const id of later) {
      const d = await statusIs(stack, id, 'delivered');
      expect(d.waitingFor).toBeUndefined();
      expect(await orderRow(stack, id)).toMatchObject({ ordered: false, held_by: null });
    }
    // The head is still in its 10-minute wait, with its one attempt: no early wake either.
    expect(await orderRow(stack, head)).toMatchObject({
      status: 'waiting_retry',
      attempt_count: 1,
      wake_early: false,
    });
    // Numbered all the same (2 and 3 went out side by side, in either order).
    expect(r.requests.map(seqOf).sort()).toEqual([1, 2, 3]);
    expect(
      (await stack.api('/v1/tasks/order-none/pushNotificationConfigs/c', { method: 'DELETE' })).status,
    ).toBe(204);
    await statusIs(stack, head, 'cancelled');
  });
});
