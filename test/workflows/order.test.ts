/**
 * Ordered delivery (DELIVERY_ORDER=per_config, the default) on the time-skipping server: a job whose
 * config has an earlier job on the wire waits without an attempt and without a workflow task (its
 * start is delayed), says so where an operator looks (the Web UI's details, GET /v1/deliveries/{id}),
 * and is delivered once the earlier one ends, woken by it. Under both delivery workflow types
 * (DELIVERY_WORKFLOW classic and lean): what an operator sees is the same.
 */
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

/** A held job's static details (the Web UI's), once its delayed workflow exists. */
async function heldDetails(workflowId: string): Promise<string | undefined> {
  const d = await eventually(
    () =>
      env.client.workflow
        .getHandle(workflowId)
        .describe()
        .catch(() => undefined),
    (x) => x?.status.name === 'RUNNING',
  );
  return d!.staticDetails();
}

describe.each(['classic', 'lean'])('ordered delivery, DELIVERY_WORKFLOW=%s (time-skipping)', (kind) => {
  it("a job held behind its config's earlier job on the wire waits, says for whom, and is delivered after it", async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    // The first push is held on the wire until the test releases it; every other push is answered at once.
    receiver = await startReceiver({
      script: (req) => (req.n === 1 ? { status: 200, gate } : { status: 200 }),
    });
    stack = await startStack(env, `order-1-${kind}`, { env: { DELIVERY_WORKFLOW: kind } });
    // A target that answered lately: its attempts run in the fast lane (lean: as local activities).
    await markTargetAnswered(stack.tdb.db, receiver.url);
    const taskId = 'task-order-1';
    await createConfig(stack, taskId, { id: 'cfg', url: receiver.url });
    const first = (await writeEvent(stack, taskId, { task: { id: taskId, n: 1 } })).deliveries[0]!.id;
    await receiver.waitFor(1);
    const second = (await writeEvent(stack, taskId, { task: { id: taskId, n: 2 } })).deliveries[0]!.id;
    const wf = makeDeliveryWorkflowId(second);

    // Held: no attempt, no workflow task (its start is delayed until its wake), and every place an
    // operator looks names the delivery it waits for: the Web UI's details and GET /v1/deliveries/{id}.
    expect(await heldDetails(wf)).toContain(
      `written behind delivery ${first} (an earlier event of this config): starts when that one ends`,
    );
    const heldHistory = (await env.client.workflow.getHandle(wf).fetchHistory()).events ?? [];
    expect(heldHistory).toHaveLength(1);
    const started = heldHistory[0]!.workflowExecutionStartedEventAttributes!;
    // Delayed by the 5 min recheck (and at most to its deadline): the wake ends the delay at once.
    expect(Number(started.firstWorkflowTaskBackoff!.seconds)).toBe(300);
    // The input carries the job's id only: once it starts, the activity decides (as for any job).
    const [input] = started.input!.payloads!;
    expect(JSON.parse(Buffer.from(input!.data!).toString())).toEqual({ jobId: second });
    const view = await json(stack.api(`/v1/deliveries/${second}`));
    expect(view).toMatchObject({ status: 'queued', waitingFor: first, sequence: 2, attempts: [] });
    expect(await attemptRows(stack, second)).toEqual([]);
    expect(receiver.requests).toHaveLength(1);

    // The first one ends (2xx): its activity wakes the second, which is delivered with its number.
    release();
    expect(await deliveryResult(env.client, first)).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(await deliveryResult(env.client, second)).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(
      receiver.requests.map((r) => [r.headers['x-a2a-push-delivery'], r.headers['x-a2a-push-sequence']]),
    ).toEqual([
      [first, '1'],
      [second, '2'],
    ]);
    // Woken by the first one's end, not by the end of its delay: a `wake` signal (with start) came
    // before its first workflow task, and it set no timer of its own.
    const events = (await env.client.workflow.getHandle(wf).fetchHistory()).events ?? [];
    const wakeAt = events.findIndex((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'wake');
    expect(wakeAt).toBeGreaterThan(0);
    expect(wakeAt).toBeLessThan(events.findIndex((e) => e.workflowTaskScheduledEventAttributes));
    expect(events.filter((e) => e.timerStartedEventAttributes)).toEqual([]);
    // Its one attempt call came after the wake.
    const callAt = events.findIndex(
      (e) => e.activityTaskScheduledEventAttributes || e.markerRecordedEventAttributes,
    );
    expect(callAt).toBeGreaterThan(wakeAt);
    expect(events[0]!.workflowExecutionStartedEventAttributes!.workflowType!.name).toBe(
      kind === 'lean' ? 'deliveryWorkflowLean' : 'deliveryWorkflow',
    );
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
    stack = await startStack(env, `order-2-${kind}`, { env: { DELIVERY_WORKFLOW: kind } });
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
    expect(await heldDetails(wf)).toContain(`written behind delivery ${first}`);
    expect(await json(stack.api(`/v1/deliveries/${second}`))).toMatchObject({
      status: 'queued',
      waitingFor: first,
      attempts: [],
    });
    release();
    expect(await deliveryResult(env.client, first)).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(await deliveryResult(env.client, second)).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(receiver.requests.map((r) => r.headers['x-a2a-push-delivery'])).toEqual([first, first, second]);
    // Attempt 2 of the head came before the earliest end of its backoff (30 s, -20 % jitter).
    const [h1, h2] = await attemptRows(stack, first);
    expect(h2!.started_at.getTime() - h1!.started_at.getTime()).toBeLessThan(24_000);
  });
});
