/**
 * Ordered delivery (DELIVERY_ORDER=per_config, the default) on the time-skipping server: a job whose
 * config has an earlier job on the wire is not due: it has no workflow and uses no attempt, says what
 * it waits for where an operator looks (GET /v1/deliveries/{id}), and its workflow starts once the
 * earlier one ends, in that end's statement's process, as a plain start.
 */
import { WorkflowNotFoundError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { makeDeliveryWorkflowId } from '../../src/ids';
import { deliveryStatusQuery } from '../../src/workflows/signals';
import {
  attemptRows,
  createConfig,
  createTimeSkippingEnv,
  deliveryResult,
  eventually,
  jobRow,
  json,
  markTargetAnswered,
  startStack,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

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

/** What the Web UI shows as the workflow's current details (the SDK's built-in metadata query). */
async function currentDetails(workflowId: string): Promise<string | undefined> {
  const m = (await env.client.workflow.getHandle(workflowId).query('__temporal_workflow_metadata')) as {
    currentDetails?: string;
  };
  return m.currentDetails;
}

/** A workflow that does not exist (yet). */
const expectNoWorkflow = (workflowId: string) =>
  expect(env.client.workflow.getHandle(workflowId).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);

describe('ordered delivery (time-skipping)', () => {
  it("a job behind its config's earlier job on the wire has no workflow until that one ends, says for whom it waits, and is delivered after it", async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    // The first push is held on the wire until the test releases it; every other push is answered at once.
    receiver = await startReceiver({
      script: (req) => (req.n === 1 ? { status: 200, gate } : { status: 200 }),
    });
    stack = await startStack(env, 'order-1', { env: {} });
    // A target that answered lately: its attempts run in the fast lane (lean: as local activities).
    await markTargetAnswered(stack.tdb.db, receiver.url);
    const taskId = 'task-order-1';
    await createConfig(stack, taskId, { id: 'cfg', url: receiver.url });
    const first = (await writeEvent(stack, taskId, { task: { id: taskId, n: 1 } })).deliveries[0]!.id;
    await receiver.waitFor(1);
    const second = (await writeEvent(stack, taskId, { task: { id: taskId, n: 2 } })).deliveries[0]!.id;
    const wf = makeDeliveryWorkflowId(second);

    // Not due: no workflow, no attempt, and GET /v1/deliveries/{id} names the delivery it waits for.
    await expectNoWorkflow(wf);
    const view = await json(stack.api(`/v1/deliveries/${second}`));
    expect(view).toMatchObject({ status: 'queued', waitingFor: first, sequence: 2, attempts: [] });
    expect(view.workflowId).toBeUndefined();
    expect(await attemptRows(stack, second)).toEqual([]);
    expect(receiver.requests).toHaveLength(1);

    // The first one ends (2xx): that statement makes the second due, and its process starts it.
    release();
    expect(await deliveryResult(env.client, first)).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(await deliveryResult(env.client, second)).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(
      receiver.requests.map((r) => [r.headers['x-a2a-push-delivery'], r.headers['x-a2a-push-sequence']]),
    ).toEqual([
      [first, '1'],
      [second, '2'],
    ]);
    // A plain start once due: a first-try delivery's history, no signal, no timer, no start delay; the
    // input carries the job's id only.
    const events = (await env.client.workflow.getHandle(wf).fetchHistory()).events ?? [];
    expect(events).toHaveLength(7);
    expect(events.filter((e) => e.workflowExecutionSignaledEventAttributes)).toEqual([]);
    expect(events.filter((e) => e.timerStartedEventAttributes)).toEqual([]);
    const started = events[0]!.workflowExecutionStartedEventAttributes!;
    expect(started.workflowType!.name).toBe('deliveryWorkflowLean');
    expect(Number(started.firstWorkflowTaskBackoff?.seconds ?? 0)).toBe(0);
    expect(JSON.parse(Buffer.from(started.input!.payloads![0]!.data!).toString())).toEqual({ jobId: second });
    expect((await json(stack.api(`/v1/deliveries/${second}`))).workflowId).toBe(wf);
    // In workflow time too, the second push started after the first.
    const [a1] = await attemptRows(stack, first);
    const [a2] = await attemptRows(stack, second);
    expect(a2!.started_at.getTime()).toBeGreaterThanOrEqual(a1!.started_at.getTime());
    expect(await currentDetails(wf)).toBe('delivered (http_200) after 1 attempt(s)');
    const status = await env.client.workflow.getHandle(wf).query(deliveryStatusQuery);
    expect(status).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(status.waitingFor).toBeUndefined();
  });

  it('a new event gives a head in backoff one early attempt; the job held behind it goes once it is delivered', async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    // The head's first push gets a 503; its second is held on the wire until the test releases it.
    receiver = await startReceiver({
      script: (req) =>
        req.n === 1 ? { status: 503 } : req.n === 2 ? { status: 200, gate } : { status: 200 },
    });
    stack = await startStack(env, 'order-2', { env: {} });
    const taskId = 'task-order-2';
    await createConfig(stack, taskId, { id: 'cfg', url: receiver.url });
    const first = (await writeEvent(stack, taskId, { task: { id: taskId, n: 1 } })).deliveries[0]!.id;
    await eventually(
      () => jobRow(stack!, first),
      (j) => j.status === 'waiting_retry',
    );
    const second = (await writeEvent(stack, taskId, { task: { id: taskId, n: 2 } })).deliveries[0]!.id;
    const wf = makeDeliveryWorkflowId(second);
    // The head's retry comes now (the event woke it), not after its backoff; the new job waits behind it.
    await receiver.waitFor(2);
    await expectNoWorkflow(wf);
    expect(await json(stack.api(`/v1/deliveries/${second}`))).toMatchObject({
      status: 'queued',
      waitingFor: first,
      attempts: [],
    });
    release();
    // Both delivered in real time before any result is asked for: asking lets the time-skipping
    // server skip time, and it would skip past the second job's deadline while its run starts.
    await eventually(
      () => jobRow(stack!, second),
      (j) => j.status === 'delivered',
    );
    expect(await deliveryResult(env.client, first)).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(await deliveryResult(env.client, second)).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(receiver.requests.map((r) => r.headers['x-a2a-push-delivery'])).toEqual([first, first, second]);
    // Attempt 2 of the head came before the earliest end of its backoff (30 s, -20 % jitter).
    const [h1, h2] = await attemptRows(stack, first);
    expect(h2!.started_at.getTime() - h1!.started_at.getTime()).toBeLessThan(24_000);
  });
});
