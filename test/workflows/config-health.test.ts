import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { DeliveryResult } from '../../src/workflows/delivery';
import {
  configRow,
  createConfig,
  createTimeSkippingEnv,
  deliveryResult,
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

const result = (jobId: string) => deliveryResult(env.client, jobId);

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

// The reset by a 2xx is proved at the activity's level (test/integration/config-health.test.ts), with
// `now` chosen exactly: two jobs' timers days apart on the time-skipping server fired out of order.
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
});
