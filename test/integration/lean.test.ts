/**
 * The lean delivery workflow end to end on the dev server: the relay starts every delivery as the lean
 * type, for an event write and for a `:retry`'s new job, and a first-try 2xx takes 7 history events.
 */
import crypto from 'node:crypto';
import { temporal as proto } from '@temporalio/proto';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { workflowStarts } from '../../src/metrics';
import {
  connectDevServer,
  createConfig,
  deliveryResult,
  json,
  startStack,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

jest.setTimeout(90_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let receiver: Receiver;
const queue = `lean-it-${crypto.randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  temporal = await connectDevServer();
  receiver = await startReceiver();
  stack = await startStack(temporal, queue, { env: {} });
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
  await temporal?.close();
});

const history = async (jobId: string) =>
  (await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(jobId)).fetchHistory()).events ?? [];
const typeOf = async (jobId: string) =>
  (await history(jobId))[0]!.workflowExecutionStartedEventAttributes!.workflowType!.name;

const eventTypes = async (jobId: string) =>
  (await history(jobId)).map((e) => proto.api.enums.v1.EventType[e.eventType!]);

/** Writes one event of a fresh task with a config at `url`; answers its job id once it ended. */
const deliverOne = async (on: Stack, taskId: string, url: string) => {
  await createConfig(on, taskId, { id: 'c', url });
  const ev = await writeEvent(on, taskId, {
    statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } },
  });
  const jobId = ev.deliveries[0]!.id;
  expect(await deliveryResult(temporal.client, jobId)).toMatchObject({ status: 'delivered', attempts: 1 });
  return jobId;
};

it('the first delivery to a target without a recent 2xx runs its attempt in the slow lane; once the target answered, a delivery is a local attempt in 7 history events', async () => {
  receiver.setScript(() => ({ status: 200 }));
  // Unknown target: the dispatcher starts the job in the slow lane (its input says so), so no local
  // call is made at all; the attempt runs as an activity on the slow lane's queue.
  const first = await deliverOne(stack, 'lean-0', receiver.url);
  expect(await typeOf(first)).toBe('deliveryWorkflowLean');
  expect(await eventTypes(first)).toEqual([
    'EVENT_TYPE_WORKFLOW_EXECUTION_STARTED',
    'EVENT_TYPE_WORKFLOW_TASK_SCHEDULED',
    'EVENT_TYPE_WORKFLOW_TASK_STARTED',
    'EVENT_TYPE_WORKFLOW_TASK_COMPLETED',
    'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED',
    'EVENT_TYPE_ACTIVITY_TASK_STARTED',
    'EVENT_TYPE_ACTIVITY_TASK_COMPLETED',
    'EVENT_TYPE_WORKFLOW_TASK_SCHEDULED',
    'EVENT_TYPE_WORKFLOW_TASK_STARTED',
    'EVENT_TYPE_WORKFLOW_TASK_COMPLETED',
    'EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES',
    'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED',
  ]);
  const started = (await history(first))[0]!.workflowExecutionStartedEventAttributes!;
  expect(JSON.parse(Buffer.from(started.input!.payloads![0]!.data!).toString())).toEqual({
    jobId: first,
    lane: 'slow',
  });
  const scheduled = (await history(first)).find((e) => e.activityTaskScheduledEventAttributes)!;
  expect(scheduled.activityTaskScheduledEventAttributes!.taskQueue!.name).toBe(`${queue}-slow`);
  // The slow lane's attempt carries the same number: one attempt, not two.
  expect(await json(stack.api(`/v1/deliveries/${first}`))).toMatchObject({
    status: 'delivered',
    attempts: [{ n: 1, outcome: 'delivered', httpStatus: 200 }],
  });

  // Known now (a 2xx within OUTBOUND known window): the attempt runs inside the workflow task.
  const jobId = await deliverOne(stack, 'lean-1', receiver.url);
  expect(receiver.requests.map((r) => r.headers['x-a2a-push-delivery'])).toContain(jobId);
  expect(await eventTypes(jobId)).toEqual([
    'EVENT_TYPE_WORKFLOW_EXECUTION_STARTED',
    'EVENT_TYPE_WORKFLOW_TASK_SCHEDULED',
    'EVENT_TYPE_WORKFLOW_TASK_STARTED',
    'EVENT_TYPE_WORKFLOW_TASK_COMPLETED',
    'EVENT_TYPE_MARKER_RECORDED',
    'EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES',
    'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED',
  ]);
  const d = await json(stack.api(`/v1/deliveries/${jobId}`));
  expect(d).toMatchObject({
    status: 'delivered',
    attempts: [{ n: 1, outcome: 'delivered', httpStatus: 200 }],
  });
});

it('a target that never answered (a black hole) never holds a workflow task: its attempt is a heartbeated activity in the slow lane', async () => {
  const hole = await startReceiver({ script: () => ({ hang: true }) });
  try {
    await createConfig(stack, 'lean-hole', { id: 'c', url: hole.url });
    const ev = await writeEvent(stack, 'lean-hole', {
      statusUpdate: { taskId: 'lean-hole', status: { state: 'TASK_STATE_WORKING' } },
    });
    const jobId = ev.deliveries[0]!.id;
    await hole.waitFor(1, 30_000);
    // The POST hangs in an activity (started: the server writes that event when it ends); the workflow
    // task that decided so has completed.
    const types = await eventTypes(jobId);
    expect(types).toContain('EVENT_TYPE_ACTIVITY_TASK_SCHEDULED');
    const scheduled = (await history(jobId)).find((e) => e.activityTaskScheduledEventAttributes)!;
    expect(scheduled.activityTaskScheduledEventAttributes!.taskQueue!.name).toBe(`${queue}-slow`);
    const pending = (await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(jobId)).describe()).raw
      .pendingActivities;
    expect(pending?.map((a) => proto.api.enums.v1.PendingActivityState[a.state!])).toEqual([
      'PENDING_ACTIVITY_STATE_STARTED',
    ]);
    expect(types.filter((t) => t === 'EVENT_TYPE_WORKFLOW_TASK_STARTED')).toHaveLength(
      types.filter((t) => t === 'EVENT_TYPE_WORKFLOW_TASK_COMPLETED').length,
    );
    await stack.api('/v1/tasks/lean-hole/pushNotificationConfigs/c', { method: 'DELETE' });
    expect(await deliveryResult(temporal.client, jobId)).toMatchObject({ status: 'cancelled' });
  } finally {
    await hole.close();
  }
});

it("a :retry's new job (started by the claim run) is a lean workflow too", async () => {
  receiver.setScript(() => ({ status: 500 }));
  await createConfig(stack, 'lean-2', { id: 'c', url: receiver.url });
  const ev = await writeEvent(stack, 'lean-2', {
    statusUpdate: { taskId: 'lean-2', status: { state: 'TASK_STATE_WORKING' } },
  });
  const failed = ev.deliveries[0]!.id;
  expect(await deliveryResult(temporal.client, failed)).toMatchObject({ status: 'failed' });
  receiver.setScript(() => ({ status: 200 }));
  const res = await stack.api(`/v1/deliveries/${failed}:retry`, { method: 'POST', json: {} });
  expect(res.status).toBe(201);
  const again = (await res.json()) as { id: string };
  expect(await deliveryResult(temporal.client, again.id)).toMatchObject({ status: 'delivered', attempts: 1 });
  expect(await typeOf(again.id)).toBe('deliveryWorkflowLean');
});

describe("eager start (the relay on the worker's connection, as every worker process runs it)", () => {
  let eagerStack: Stack;
  const eagerQueue = `${queue}-eager`;
  beforeAll(async () => {
    eagerStack = await startStack(temporal, eagerQueue, { env: {}, eager: true });
  });
  afterAll(async () => {
    await eagerStack?.close();
  });
  const started = async (jobId: string) =>
    (await history(jobId))[0]!.workflowExecutionStartedEventAttributes!;
  const eagerStarts = async () =>
    (await workflowStarts.get()).values
      .filter((v) => v.labels.eager === 'true')
      .reduce((a, v) => a + v.value, 0);

  it('the start hands the first workflow task to the local worker: the server accepted it eagerly, still 7 events', async () => {
    receiver.setScript(() => ({ status: 200 }));
    // The stack's own database has not seen the receiver answer yet: one delivery makes it known.
    await deliverOne(eagerStack, 'lean-eager-0', receiver.url);
    const before = await eagerStarts();
    await createConfig(eagerStack, 'lean-eager-1', { id: 'c', url: receiver.url });
    const ev = await writeEvent(eagerStack, 'lean-eager-1', {
      statusUpdate: { taskId: 'lean-eager-1', status: { state: 'TASK_STATE_WORKING' } },
    });
    const jobId = ev.deliveries[0]!.id;
    expect(await deliveryResult(temporal.client, jobId)).toMatchObject({ status: 'delivered', attempts: 1 });
    expect((await started(jobId)).eagerExecutionAccepted).toBe(true);
    expect(await history(jobId)).toHaveLength(7);
    expect(await eagerStarts()).toBe(before + 1);
  });

  it('the stack without it starts through matching (the server did not take the start as eager)', async () => {
    receiver.setScript(() => ({ status: 200 }));
    await createConfig(stack, 'lean-eager-2', { id: 'c', url: receiver.url });
    const ev = await writeEvent(stack, 'lean-eager-2', {
      statusUpdate: { taskId: 'lean-eager-2', status: { state: 'TASK_STATE_WORKING' } },
    });
    const jobId = ev.deliveries[0]!.id;
    expect(await deliveryResult(temporal.client, jobId)).toMatchObject({ status: 'delivered' });
    expect((await started(jobId)).eagerExecutionAccepted ?? false).toBe(false);
  });
});

it('a worker with the fewest workflow task slots the setting allows (WORKER_WORKFLOW_TASK_SLOTS=2) starts and delivers', async () => {
  // Half of 2 slots would be one poller; a worker that caches runs needs two (sdk-core refuses to
  // start otherwise), so the pollers are at least 2 (workflowTaskPollers).
  const small = await startStack(temporal, `${queue}-two-slots`, {
    env: { WORKER_WORKFLOW_TASK_SLOTS: '2' },
  });
  try {
    receiver.setScript(() => ({ status: 200 }));
    await deliverOne(small, 'lean-two-slots', receiver.url);
  } finally {
    await small.close();
  }
});
