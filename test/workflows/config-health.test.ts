import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { DeliveryResult } from '../../src/workflows/delivery';
import {
  attemptRows,
  configRow,
  createConfig,
  createTimeSkippingEnv,
  deliveryResult,
  json,
  markTargetAnswered,
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
async function setup(answers: number[], more: Record<string, string> = {}) {
  let i = 0;
  receiver = await startReceiver({ script: () => ({ status: answers[i++] ?? 500 }) });
  stack = await startStack(env, `health-${++queue}`, {
    // Deadlines are written in real time while the server's clock moves days: give them room.
    env: {
      DELIVERY_DEADLINE: '60d',
      RETRY_INITIAL: '7d',
      RETRY_FACTOR: '1',
      RETRY_MAX: '7d',
      DELIVERY_MAX_ATTEMPTS: '2',
      ...more,
    },
  });
  const taskId = `task-health-${queue}`;
  await createConfig(stack, taskId, { id: 'cfg', url: receiver.url });
  // A target that answered lately: the attempts are local activities, inside workflow tasks. (A first
  // contact's attempt is an activity in the slow lane, and while only an activity runs, the time-skipping
  // server skips ahead when a result is awaited: past the next job's deadline.)
  await markTargetAnswered(stack.tdb.db, receiver.url);
  const s = stack;
  return {
    taskId,
    async event(): Promise<DeliveryResult> {
      return (await this.job()).result;
    },
    /** One event's job: its result, and the workflow time (ms) its last attempt started: its end. */
    async job(): Promise<{ result: DeliveryResult; endedAt: number }> {
      const ev = await writeEvent(s, taskId, {
        statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } },
      });
      const id = ev.deliveries[0]!.id;
      const r = await result(id);
      const attempts = await attemptRows(s, id);
      return { result: r, endedAt: attempts.at(-1)!.started_at.getTime() };
    },
    async events(): Promise<Array<{ kind: string; reason?: string; at: string; configId: string }>> {
      return (await json(s.api('/v1/configEvents?after=0'))).items;
    },
    async health() {
      return (await json(s.api(`/v1/tasks/${taskId}/pushNotificationConfigs/cfg`))).health;
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

describe('config events (CONFIG_WARN_AFTER = 1d, time-skipping)', () => {
  const DAY = 86_400_000;
  const iso = (ms: number) => new Date(ms).toISOString();

  it('a failing stretch older than CONFIG_WARN_AFTER gets one `failing` warning; the stop follows at CONFIG_FAILING_AFTER from the last 2xx, each at the end of the job that made it', async () => {
    // Retries 3 days apart (× U(0.8, 1.2)): a job without a 2xx ends 2.4 to 3.6 days after it began.
    const c = await setup([200, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503], {
      RETRY_INITIAL: '3d',
      RETRY_MAX: '3d',
      CONFIG_WARN_AFTER: '1d',
      CONFIG_FAILING_AFTER: '10d',
    });
    const first = await c.job();
    expect(first.result).toMatchObject({ status: 'delivered' });
    expect(await c.health()).toEqual({ lastDeliveredAt: iso(first.endedAt), failedJobs: 0 });
    // The first job without a 2xx starts the failing stretch: no warning yet.
    const second = await c.job();
    expect(second.result).toMatchObject({ status: 'exhausted' });
    expect(await c.health()).toEqual({
      lastDeliveredAt: iso(first.endedAt),
      failingSince: iso(second.endedAt),
      failedJobs: 1,
    });
    expect(await c.events()).toEqual([]);
    // The next ends more than a day after the stretch began: the warning, at its end.
    const third = await c.job();
    expect(await c.events()).toEqual([
      {
        cursor: expect.any(String),
        taskId: c.taskId,
        configId: 'cfg',
        kind: 'failing',
        reason: 'failing',
        at: iso(third.endedAt),
      },
    ]);
    // Jobs go on failing until one ends 10 days (and the clock's minute) after the last 2xx: stopped.
    const ends: number[] = [];
    for (let k = 0; k < 4 && (await configRow(stack!, c.taskId, 'cfg')).status === 'active'; k++)
      ends.push((await c.job()).endedAt);
    const stopAt = ends.find((e) => e >= first.endedAt + 10 * DAY + 60_000);
    expect(stopAt).toBeDefined();
    expect(ends.at(-1)).toBe(stopAt);
    expect((await c.events()).map((e) => [e.kind, e.reason, e.at])).toEqual([
      ['failing', 'failing', iso(third.endedAt)],
      ['stopped', 'failing', iso(stopAt!)],
    ]);
    expect(await c.health()).toEqual({
      lastDeliveredAt: iso(first.endedAt),
      failingSince: iso(second.endedAt),
      failedJobs: 2 + ends.length,
    });
  });

  it('a 2xx after the warning ends the stretch: `recovered` at its time, and the health is reset', async () => {
    const c = await setup([200, 503, 503, 503, 503, 200], {
      RETRY_INITIAL: '3d',
      RETRY_MAX: '3d',
      CONFIG_WARN_AFTER: '1d',
      CONFIG_FAILING_AFTER: '30d',
    });
    await c.job();
    await c.job();
    const warned = await c.job();
    const back = await c.job();
    expect(back.result).toMatchObject({ status: 'delivered' });
    expect((await c.events()).map((e) => [e.kind, e.at])).toEqual([
      ['failing', iso(warned.endedAt)],
      ['recovered', iso(back.endedAt)],
    ]);
    expect(await c.health()).toEqual({ lastDeliveredAt: iso(back.endedAt), failedJobs: 0 });
  });

  it('a config quiet for longer than CONFIG_FAILING_AFTER stops at its first failure, with `stopped` and no warning', async () => {
    // Retries 7 days apart: the failure ends 5.6 to 8.4 days after the last 2xx.
    const c = await setup([200, 503, 503], { CONFIG_WARN_AFTER: '1d', CONFIG_FAILING_AFTER: '5d' });
    await c.job();
    const failed = await c.job();
    expect(failed.result).toMatchObject({ status: 'exhausted' });
    expect((await c.events()).map((e) => [e.kind, e.reason, e.at])).toEqual([
      ['stopped', 'failing', iso(failed.endedAt)],
    ]);
  });
});
