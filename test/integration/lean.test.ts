/**
 * DELIVERY_WORKFLOW=lean end to end on the dev server (issue 21): the dispatcher starts every delivery
 * as the lean type, by the direct start (an event write) and by the claim run (a `:retry`'s new job),
 * and a first-try 2xx takes 7 history events.
 */
import crypto from 'node:crypto';
import { temporal as proto } from '@temporalio/proto';
import { makeDeliveryWorkflowId } from '../../src/ids';
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
  stack = await startStack(temporal, queue, { env: { DELIVERY_WORKFLOW: 'lean' } });
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

it('an event is delivered by a lean workflow started by the dispatcher, in 7 history events', async () => {
  receiver.setScript(() => ({ status: 200 }));
  await createConfig(stack, 'lean-1', { id: 'c', url: receiver.url });
  const ev = await writeEvent(stack, 'lean-1', {
    statusUpdate: { taskId: 'lean-1', status: { state: 'TASK_STATE_WORKING' } },
  });
  const jobId = ev.deliveries[0]!.id;
  expect(await deliveryResult(temporal.client, jobId)).toMatchObject({ status: 'delivered', attempts: 1 });
  expect(receiver.requests.map((r) => r.headers['x-a2a-push-delivery'])).toContain(jobId);
  expect(await typeOf(jobId)).toBe('deliveryWorkflowLean');
  const events = await history(jobId);
  expect(events.map((e) => proto.api.enums.v1.EventType[e.eventType!])).toEqual([
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
