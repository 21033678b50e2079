/**
 * The two delivery workflow types on the time-skipping server: the lean one, which every delivery starts
 * as (the fast-lane attempt as a local activity, recorded as a marker), and the classic one (an activity
 * per attempt), whose runs started by the previous version still finish with these activities. Same
 * behaviour, fewer history events: each test runs under both types and reads the attempts where each
 * type writes them (activity tasks, or local-activity markers).
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { temporal as proto } from '@temporalio/proto';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { DELIVERY_WORKFLOW_TYPES } from '../../src/starts/client';
import { deliveryStatusQuery } from '../../src/workflows/signals';
import {
  attemptCalls,
  attemptRows,
  createConfig,
  createTimeSkippingEnv,
  deliveryResult,
  eventually,
  jobRow,
  markTargetAnswered,
  startClassicRun,
  startStack,
  summaryOf,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver, type ScriptedAnswer } from '../helpers/receiver';

jest.setTimeout(120_000);

let env: TestWorkflowEnvironment;
let stack: Stack | undefined;
let receiver: Receiver | undefined;
beforeEach(async () => {
  env = await createTimeSkippingEnv();
});
afterEach(async () => {
  await stack?.close();
  await receiver?.close();
  await env?.teardown();
  stack = undefined;
  receiver = undefined;
});

type Kind = 'classic' | 'lean';
let queue = 0;

type HistoryEvent = proto.api.history.v1.IHistoryEvent;

const history = async (jobId: string): Promise<HistoryEvent[]> =>
  (await env.client.workflow.getHandle(makeDeliveryWorkflowId(jobId)).fetchHistory()).events ?? [];

/** EVENT_TYPE_MARKER_RECORDED → MarkerRecorded */
const typeName = (e: HistoryEvent) =>
  proto.api.enums.v1.EventType[e.eventType!]!.replace(/^EVENT_TYPE_/, '')
    .toLowerCase()
    .replace(/(^|_)(\w)/g, (_, __, c: string) => c.toUpperCase());

/** What the Web UI shows as the workflow's current details (the SDK's built-in metadata query). */
async function currentDetails(jobId: string): Promise<string | undefined> {
  const m = (await env.client.workflow
    .getHandle(makeDeliveryWorkflowId(jobId))
    .query('__temporal_workflow_metadata')) as { currentDetails?: string };
  return m.currentDetails;
}

let kindNow: Kind = 'lean';
let queueNow = '';

async function setUp(kind: Kind, script: (n: number) => ScriptedAnswer, more: Record<string, string> = {}) {
  receiver = await startReceiver({ script: (req) => script(req.n) });
  const q = `lean-${kind}-${++queue}`;
  stack = await startStack(env, q, { env: more });
  kindNow = kind;
  queueNow = q;
  // Classic runs are the previous version's: this test starts them itself.
  if (kind === 'classic') await stack.relay.stop();
  // The fast lane takes only a target that answered a 2xx lately (a first contact goes to the slow
  // lane: test/integration/lean.test.ts): as if the receiver had answered a moment ago.
  await markTargetAnswered(stack.tdb.db, receiver.url);
  return q;
}

async function event(taskId: string, url = receiver!.url): Promise<string> {
  await createConfig(stack!, taskId, { id: 'cfg', url }).catch((err: Error) => {
    if (!/409/.test(err.message)) throw err;
  });
  const jobId = (
    await writeEvent(stack!, taskId, { statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } } })
  ).deliveries[0]!.id;
  if (kindNow === 'classic') await startClassicRun(env.client, queueNow, stack!, jobId);
  return jobId;
}

describe('lean delivery workflow (time-skipping)', () => {
  it('a first-try 2xx is 7 history events: one workflow task, the attempt as a marker, the status upsert', async () => {
    await setUp('lean', () => ({ status: 200 }));
    const jobId = await event('task-first-try');
    expect(await deliveryResult(env.client, jobId)).toMatchObject({ status: 'delivered', attempts: 1 });
    const events = await history(jobId);
    expect(events.map(typeName)).toEqual([
      'WorkflowExecutionStarted',
      'WorkflowTaskScheduled',
      'WorkflowTaskStarted',
      'WorkflowTaskCompleted',
      'MarkerRecorded',
      'UpsertWorkflowSearchAttributes',
      'WorkflowExecutionCompleted',
    ]);
    const started = events[0]!.workflowExecutionStartedEventAttributes!;
    expect(started.workflowType!.name).toBe('deliveryWorkflowLean');
    // A killed worker is noticed by the workflow task timeout, set at start.
    expect(Number(started.workflowTaskTimeout!.seconds)).toBe(20);
    // What the Web UI labels the attempt with: the marker's summary.
    expect(attemptCalls(events)).toEqual([{ on: 'local', summary: 'attempt 1' }]);
    expect(await attemptRows(stack!, jobId)).toMatchObject([
      { n: 1, outcome: 'delivered', http_status: 200 },
    ]);
  });
  it('attempts that hang do not stall the worker: past a second they stop counting against its 10 workflow task slots', async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    // DELIVERY_TIMEOUT 60 s: no held attempt may time out before the release, on a slow machine.
    await setUp('lean', () => ({ status: 200, gate }), {
      OUTBOUND_HOST_CONCURRENCY: '30',
      DELIVERY_TIMEOUT: '60s',
    });
    const other = await startReceiver({ script: () => ({ status: 200 }) });
    try {
      await markTargetAnswered(stack!.tdb.db, other.url);
      const hung: string[] = [];
      for (let i = 0; i < 12; i++) hung.push(await event(`task-hang-${i}`));
      // All twelve on the wire at once, each a local attempt holding its run's workflow task slot: with
      // 10 fixed slots the worker took no new task past 7 of them.
      await receiver!.waitFor(12, 15_000);
      const elsewhere = await event('task-elsewhere', other.url);
      expect(await deliveryResult(env.client, elsewhere)).toMatchObject({ status: 'delivered', attempts: 1 });
      expect(receiver!.requests).toHaveLength(12);
      release();
      for (const jobId of hung)
        expect(await deliveryResult(env.client, jobId)).toMatchObject({ status: 'delivered', attempts: 1 });
      for (const jobId of [...hung, elsewhere])
        expect(attemptCalls(await history(jobId))).toEqual([{ on: 'local', summary: 'attempt 1' }]);
    } finally {
      await other.close();
    }
  });
});

describe.each<Kind>(['classic', 'lean'])('delivery workflow %s (time-skipping)', (kind) => {
  it('503 then 200: delivered on attempt 2, both attempts recorded, the same summaries and status', async () => {
    const q = await setUp(kind, (n) => ({ status: n === 1 ? 503 : 200 }));
    const jobId = await event('task-retry');
    expect(await deliveryResult(env.client, jobId)).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(await jobRow(stack!, jobId)).toMatchObject({ status: 'delivered', attempt_count: 2 });
    expect((await attemptRows(stack!, jobId)).map((a) => [a.n, a.outcome, a.http_status])).toEqual([
      [1, 'retry', 503],
      [2, 'delivered', 200],
    ]);
    expect(receiver!.requests).toHaveLength(2);
    const events = await history(jobId);
    expect(events[0]!.workflowExecutionStartedEventAttributes!.workflowType!.name).toBe(
      DELIVERY_WORKFLOW_TYPES[kind],
    );
    const on = kind === 'lean' ? 'local' : q;
    expect(attemptCalls(events)).toEqual([
      { on, summary: 'attempt 1' },
      { on, summary: 'attempt 2 of 8' },
    ]);
    const timers = events.filter((e) => e.timerStartedEventAttributes).map(summaryOf);
    expect(timers).toEqual([expect.stringMatching(/^attempt 1 of 8 \(http_503\), waiting \d+ s$/)]);
    expect(await currentDetails(jobId)).toBe('delivered (http_200) after 2 attempt(s)');
    expect(
      await env.client.workflow.getHandle(makeDeliveryWorkflowId(jobId)).query(deliveryStatusQuery),
    ).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(events).toHaveLength(kind === 'lean' ? 14 : 24);
  });

  it('a target at OUTBOUND_HOST_CONCURRENCY: the next job waits for a slot (no attempt), says so, and a freed slot wakes it', async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    await setUp(kind, (n) => (n === 1 ? { status: 200, gate } : { status: 200 }), {
      OUTBOUND_HOST_CONCURRENCY: '1',
    });
    const first = await event('task-slot-1');
    await receiver!.waitFor(1);
    // Another config (another line): not held by order, only by the host's bound.
    const second = await event('task-slot-2');
    const host = `127.0.0.1:${receiver!.port}`;
    await eventually(
      () => currentDetails(second).catch(() => undefined),
      (d) => d === `waiting for a slot at host ${host} for attempt 1 of 8`,
    );
    expect(
      await env.client.workflow.getHandle(makeDeliveryWorkflowId(second)).query(deliveryStatusQuery),
    ).toMatchObject({ status: 'queued', attempts: 0, waitingForSlot: host });
    expect(await attemptRows(stack!, second)).toEqual([]);
    release();
    expect(await deliveryResult(env.client, first)).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(await deliveryResult(env.client, second)).toMatchObject({ status: 'delivered', attempts: 1 });
    const events = await history(second);
    // Woken by the freed slot's grant (a `wake` signal), not by its 5-min recheck.
    expect(
      events.filter((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'wake'),
    ).not.toEqual([]);
    expect(events.filter((e) => e.timerFiredEventAttributes)).toEqual([]);
    expect(receiver!.requests).toHaveLength(2);
  });

  it('a target that timed out: the next attempt runs in the slow lane, a normal activity on its own queue', async () => {
    const q = await setUp(kind, (n) => (n === 1 ? { hang: true } : { status: 200 }), {
      DELIVERY_TIMEOUT: '1s',
    });
    const jobId = await event('task-slow');
    expect(await deliveryResult(env.client, jobId)).toMatchObject({ status: 'delivered', attempts: 2 });
    expect((await attemptRows(stack!, jobId)).map((a) => [a.n, a.outcome, a.error])).toEqual([
      [1, 'retry', 'timeout'],
      [2, 'delivered', null],
    ]);
    expect(attemptCalls(await history(jobId))).toEqual([
      { on: kind === 'lean' ? 'local' : q, summary: 'attempt 1' },
      { on: `${q}-slow`, summary: 'attempt 2 of 8 (slow lane)' },
    ]);
  });
});
