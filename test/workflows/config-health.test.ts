import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { WorkflowNotFoundError } from '@temporalio/client';
import { makeDeliveryWorkflowId } from '../../src/ids';
import type { DeliveryResult } from '../../src/workflows/delivery';
import {
  configRow,
  createConfig,
  createTimeSkippingEnv,
  json,
  startStack,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

jest.setTimeout(120_000);

// Config health (contract §10) in workflow time: the time-skipping server moves days in seconds.
let env: TestWorkflowEnvironment;
let stack: Stack | undefined;
let receiver: Receiver | undefined;
let queue = 0;
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

async function result(jobId: string): Promise<DeliveryResult> {
  for (;;) {
    try {
      return (await env.client.workflow.getHandle(makeDeliveryWorkflowId(jobId)).result()) as DeliveryResult;
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/**
 * A config whose receiver answers `answers` in order; retries 7 days apart (× U(0.8, 1.2): 5.6 to
 * 8.4 days, always past CONFIG_FAILING_AFTER's 5), two attempts per job. The days pass in workflow
 * time, on the jobs' own timers.
 */
async function setup(answers: number[]) {
  let i = 0;
  receiver = await startReceiver({ script: () => ({ status: answers[i++] ?? 500 }) });
  stack = await startStack(env, `health-${++queue}`, {
    // Deadlines are written in real time while the server's clock moves days: give them room.
    env: {
      DELIVERY_DEADLINE: '30d',
      RETRY_INITIAL: '7d',
      RETRY_FACTOR: '1',
      RETRY_MAX: '7d',
      DELIVERY_MAX_ATTEMPTS: '2',
    },
  });
  const taskId = `task-health-${queue}`;
  await createConfig(stack, taskId, { id: 'cfg', url: receiver.url });
  const s = stack;
  return {
    taskId,
    async event(): Promise<DeliveryResult> {
      const ev = await writeEvent(s, taskId, {
        statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } },
      });
      return result(ev.deliveries[0]!.id);
    },
  };
}

describe('config health (CONFIG_FAILING_AFTER = 5d, time-skipping)', () => {
  it('a job ending without a 2xx more than 5 days after the first attempt stops the config as failing, with an audit row', async () => {
    const c = await setup([503, 503]);
    expect(await c.event()).toMatchObject({ status: 'exhausted', attempts: 2 });
    expect(await configRow(stack!, c.taskId, 'cfg')).toEqual({ status: 'stopped', status_reason: 'failing' });
    const view = await json(stack!.api(`/v1/tasks/${c.taskId}/pushNotificationConfigs/cfg`));
    expect(view).toMatchObject({ status: 'stopped', statusReason: 'failing' });
    const listed = await json(stack!.api('/v1/pushNotificationConfigs?status=stopped'));
    expect(listed.configs.map((x: { id: string }) => x.id)).toEqual(['cfg']);
    const audit = await json(stack!.api('/v1/audit?after=0'));
    expect(audit.items).toContainEqual(
      expect.objectContaining({
        actor: 'system',
        action: 'push_config.status_changed',
        after: 'stopped (failing)',
      }),
    );
    // A stopped config gets no new jobs.
    const again = await writeEvent(stack!, c.taskId, {
      statusUpdate: { taskId: c.taskId, status: { state: 'TASK_STATE_WORKING' } },
    });
    expect(again.deliveries).toEqual([]);
    expect(receiver!.requests).toHaveLength(2);
  });

  it('a 2xx in between resets the clock: a failure after it leaves the config active', async () => {
    // Two jobs at once. A: 503, then 200 after 5.6 to 8.4 days. B: 429 with Retry-After 8.5 days,
    // then 500 (failed): when B fails, the config's first attempt is 8.5 days old, its last 2xx is not.
    const c = await setup([]);
    const order: string[] = [];
    receiver!.setScript((req) => {
      const id = req.headers['x-a2a-push-delivery'] as string;
      if (!order.includes(id)) order.push(id);
      const seen = receiver!.requests.filter((r) => r.headers['x-a2a-push-delivery'] === id).length;
      if (id === order[0]) return { status: seen === 1 ? 503 : 200 };
      return seen === 1 ? { status: 429, headers: { 'retry-after': String(8.5 * 86_400) } } : { status: 500 };
    });
    const write = () =>
      writeEvent(stack!, c.taskId, {
        statusUpdate: { taskId: c.taskId, status: { state: 'TASK_STATE_WORKING' } },
      });
    const a = (await write()).deliveries[0]!.id;
    await receiver!.waitFor(1, 20_000);
    const b = (await write()).deliveries[0]!.id;
    expect(await result(a)).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(await result(b)).toMatchObject({ status: 'failed', attempts: 2 });
    expect(await configRow(stack!, c.taskId, 'cfg')).toMatchObject({ status: 'active' });
  });
});
