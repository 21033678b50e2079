import { WorkflowNotFoundError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Agent, fetch as undiciFetch } from 'undici';
import { makeRegistrationWorkflowId } from '../../src/ids';
import type { RegistrationResult } from '../../src/workflows/registration';
import { startTestAgent, type TestAgent } from '../helpers/agent';
import {
  createTimeSkippingEnv,
  eventually,
  json,
  startStack,
  type Json,
  type Stack,
} from '../helpers/harness';
import { makeTestTls } from '../helpers/tls';

jest.setTimeout(120_000);

let env: TestWorkflowEnvironment;
let stack: Stack | undefined;
let agent: TestAgent | undefined;
let queue = 0;
const tlsAgent = new Agent({ connect: { ca: makeTestTls().caPem } });

beforeEach(async () => {
  env = await createTimeSkippingEnv();
});
afterEach(async () => {
  await stack?.close();
  await agent?.close();
  await env?.teardown();
  stack = undefined;
  agent = undefined;
});
afterAll(async () => {
  await tlsAgent.close();
});

async function setup(
  o: {
    env?: Record<string, string>;
    apiEnv?: Record<string, string>;
    agent?: Parameters<typeof startTestAgent>[0];
  } = {},
) {
  agent = await startTestAgent(o.agent);
  stack = await startStack(env, `registration-${++queue}`, {
    env: { POLL_INITIAL: '30s', POLL_MAX: '15m', ...o.env },
    ...(o.apiEnv ? { apiEnv: o.apiEnv } : {}),
  });
  return { agent, stack };
}

async function register(body: Record<string, unknown>): Promise<Json> {
  const res = await stack!.api('/v1/registrations', { method: 'POST', json: body });
  const b: Json = await res.json();
  if (res.status !== 201) throw new Error(`register: ${res.status} ${JSON.stringify(b)}`);
  return b;
}

const getReg = (id: string) => json(stack!.api(`/v1/registrations/${id}`));
const feed = async () => (await json(stack!.api('/v1/resolutions?after=0&limit=1000'))).items as Json[];

/** Skips time while it waits. */
async function result(id: string): Promise<RegistrationResult> {
  for (;;) {
    try {
      return (await env.client.workflow
        .getHandle(makeRegistrationWorkflowId(id))
        .result()) as RegistrationResult;
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

const callback = (url: string, credential: string, body: unknown) =>
  undiciFetch(url, {
    method: 'POST',
    dispatcher: tlsAgent,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${credential}` },
    body: JSON.stringify(body),
  });

const getTasks = () => agent!.calls.filter((c) => c.kind === 'getTask').length;

/** Timer durations in the workflow's history, in seconds (the poll spacing in workflow time). */
async function timerSeconds(id: string): Promise<number[]> {
  const h = await env.client.workflow.getHandle(makeRegistrationWorkflowId(id)).fetchHistory();
  return (h.events ?? [])
    .map((e) => e.timerStartedEventAttributes?.startToFireTimeout)
    .filter((d): d is NonNullable<typeof d> => !!d)
    .map((d) => Number(d.seconds ?? 0) + Math.round((d.nanos ?? 0) / 1e9));
}

/** `callback` signals in the history of the registration's current run. */
async function callbackSignals(id: string): Promise<number> {
  const h = await env.client.workflow.getHandle(makeRegistrationWorkflowId(id)).fetchHistory();
  return (h.events ?? []).filter((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'callback')
    .length;
}

describe('registration workflow (time-skipping, real A2A agent on HTTPS)', () => {
  it('separate: creates the remote config with our id and callback URL, then GetTask; resolves on the state the agent reports', async () => {
    await setup();
    agent!.setState('rt-1', 'TASK_STATE_WORKING');
    const reg = await register({
      mode: 'separate',
      remoteTaskId: 'rt-1',
      agent: { url: agent!.url, bearerToken: 'nr-llm-token' },
    });
    expect(reg).toMatchObject({
      mode: 'separate',
      status: 'active',
      remoteTaskId: 'rt-1',
      pushEnabled: true,
    });
    expect(reg.pushNotificationConfig).toBeUndefined();
    await eventually(
      async () => getTasks(),
      (n) => n >= 1,
    );
    const cfgs = agent!.pushConfigs('rt-1');
    expect(cfgs).toEqual([
      expect.objectContaining({
        id: reg.id,
        url: `${stack!.inboxUrl}/a2a/push/${reg.id}`,
        authentication: { scheme: 'Bearer', credentials: expect.any(String) },
      }),
    ]);
    const kinds = agent!.calls.filter((c) => c.kind !== 'card').map((c) => c.kind);
    expect(kinds.slice(0, 2)).toEqual(['createPushConfig', 'getTask']);
    expect(agent!.calls.every((c) => c.authorization === 'Bearer nr-llm-token')).toBe(true);

    agent!.setState('rt-1', 'TASK_STATE_COMPLETED');
    const pushes = await agent!.push('rt-1');
    expect(pushes.map((p) => p.status)).toEqual([200]);
    const r = await result(reg.id);
    expect(r).toMatchObject({ status: 'resolved', remoteState: 'TASK_STATE_COMPLETED' });
    const after = await getReg(reg.id);
    expect(after).toMatchObject({
      status: 'resolved',
      remoteState: 'TASK_STATE_COMPLETED',
      resolvedAt: expect.any(String),
    });
    expect((await feed()).map((f) => [f.kind, f.state, f.terminal])).toEqual([
      ['state', 'TASK_STATE_COMPLETED', true],
    ]);
    // The remote config is deleted best-effort at the end.
    expect(agent!.pushConfigs('rt-1')).toEqual([]);
  });

  it('a callback that claims COMPLETED while GetTask says WORKING resolves nothing', async () => {
    await setup();
    agent!.setState('rt-2', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'separate', remoteTaskId: 'rt-2', agent: { url: agent!.url } });
    await eventually(
      async () => agent!.pushConfigs('rt-2').length,
      (n) => n === 1,
    );
    const credential = agent!.pushConfigs('rt-2')[0]!.authentication!.credentials;
    const before = getTasks();
    const res = await callback(`${stack!.inboxUrl}/a2a/push/${reg.id}`, credential, {
      statusUpdate: { taskId: 'rt-2', status: { state: 'TASK_STATE_COMPLETED' } },
    });
    expect(res.status).toBe(200);
    const r = await eventually(
      () => getReg(reg.id),
      (g) => g.callbacks.pending === 0 && getTasks() > before,
    );
    expect(r).toMatchObject({
      status: 'active',
      remoteState: 'TASK_STATE_WORKING',
      callbacks: { received: 1, pending: 0 },
    });
    expect(await feed()).toEqual([]);
  });

  it('100 duplicate callbacks resolve once; their signals are coalesced', async () => {
    await setup({ env: { INBOX_BOUND_PER_REGISTRATION: '1000' } });
    agent!.setState('rt-3', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'separate', remoteTaskId: 'rt-3', agent: { url: agent!.url } });
    // The run is up and waiting (its first GetTask answered WORKING): every signal lands in this run.
    await eventually(
      async () => agent!.pushConfigs('rt-3').length === 1 && getTasks() >= 1,
      (ok) => ok,
    );
    const credential = agent!.pushConfigs('rt-3')[0]!.authentication!.credentials;
    const url = `${stack!.inboxUrl}/a2a/push/${reg.id}`;
    const body = { statusUpdate: { taskId: 'rt-3', status: { state: 'TASK_STATE_COMPLETED' } } };
    const signalsBefore = await callbackSignals(reg.id);
    const answers = await Promise.all(
      Array.from({ length: 100 }, () => callback(url, credential, body).then((r) => r.status)),
    );
    expect(answers.every((s) => s === 200)).toBe(true);
    await eventually(
      () => getReg(reg.id),
      (g) => g.callbacks.pending === 0,
    );
    // The callback body decided nothing: the agent still says WORKING.
    expect(await getReg(reg.id)).toMatchObject({ status: 'active', remoteState: 'TASK_STATE_WORKING' });
    // Signals were coalesced: a few signal events in the run's history, not one per callback.
    expect((await callbackSignals(reg.id)) - signalsBefore).toBeLessThan(10);

    agent!.setState('rt-3', 'TASK_STATE_COMPLETED');
    expect((await callback(url, credential, body)).status).toBe(200);
    const r = await result(reg.id);
    expect(r.status).toBe('resolved');
    const items = await feed();
    expect(items.filter((f) => f.terminal)).toHaveLength(1);
    const g = await getReg(reg.id);
    expect(g.callbacks.received).toBe(101);
    expect(g.callbacks.pending).toBe(0);
  });

  it('callbacks that arrive while GetTask runs get no signal of their own; the workflow drains them with one more GetTask', async () => {
    await setup();
    agent!.setState('rt-d', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'separate', remoteTaskId: 'rt-d', agent: { url: agent!.url } });
    await eventually(
      async () => agent!.pushConfigs('rt-d').length === 1 && getTasks() >= 1,
      (ok) => ok,
    );
    const credential = agent!.pushConfigs('rt-d')[0]!.authentication!.credentials;
    const url = `${stack!.inboxUrl}/a2a/push/${reg.id}`;
    const body = { statusUpdate: { taskId: 'rt-d', status: { state: 'TASK_STATE_WORKING' } } };
    const signals = () => callbackSignals(reg.id);
    const signalsBefore = await signals();
    const getTasksBefore = getTasks();

    const hold = agent!.holdNextGetTask();
    // The first unprocessed callback signals; its GetTask is held at the agent.
    expect((await callback(url, credential, body)).status).toBe(200);
    await hold.reached;
    // Two more while that GetTask runs: stored, no signal.
    expect((await callback(url, credential, body)).status).toBe(200);
    expect((await callback(url, credential, body)).status).toBe(200);
    expect((await getReg(reg.id)).callbacks).toEqual({ received: 3, pending: 3, late: 0 });
    hold.release();

    // The held GetTask processes the first; the workflow sees two left and calls GetTask once more.
    await eventually(
      () => getReg(reg.id),
      (g) => g.callbacks.pending === 0,
    );
    expect(getTasks()).toBe(getTasksBefore + 2);
    expect(await signals()).toBe(signalsBefore + 1);
    expect(await timerSeconds(reg.id)).toContain(1);
    expect((await getReg(reg.id)).status).toBe('active');
  });

  it('at its bound the inbox answers 429, and accepts again once a GetTask has processed the backlog', async () => {
    await setup({ env: { INBOX_BOUND_PER_REGISTRATION: '3' } });
    agent!.setState('rt-b', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'embedded', agent: { url: agent!.url } });
    const cfg = reg.pushNotificationConfig;
    const send = () =>
      callback(cfg.url, cfg.authentication.credentials, { task: { id: 'rt-b' } }).then((r) => r.status);
    // No remote task id yet: nothing is processed, so the bound fills.
    expect([await send(), await send(), await send(), await send()]).toEqual([200, 200, 200, 429]);
    expect((await getReg(reg.id)).callbacks).toEqual({ received: 3, pending: 3, late: 0 });
    await stack!.api(`/v1/registrations/${reg.id}/remote-task`, {
      method: 'POST',
      json: { remoteTaskId: 'rt-b' },
    });
    await eventually(
      () => getReg(reg.id),
      (g) => g.callbacks.pending === 0,
    );
    // A long-running task never stays at its bound: each GetTask drains what came before it.
    for (let round = 0; round < 3; round++) {
      expect([await send(), await send(), await send()]).toEqual([200, 200, 200]);
      await eventually(
        () => getReg(reg.id),
        (g) => g.callbacks.pending === 0,
      );
    }
    expect((await getReg(reg.id)).callbacks).toEqual({ received: 12, pending: 0, late: 0 });
  });

  it('a lost callback still resolves by polling, with the poll interval doubling up to POLL_MAX', async () => {
    await setup({ env: { POLL_INITIAL: '30s', POLL_MAX: '4m' } });
    agent!.setState('rt-4', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'separate', remoteTaskId: 'rt-4', agent: { url: agent!.url } });
    await eventually(
      async () => getTasks(),
      (n) => n >= 1,
    );
    // Skip 30 min of workflow time without any callback: only polls happen.
    await env.sleep('30 minutes');
    agent!.setState('rt-4', 'TASK_STATE_FAILED');
    const r = await result(reg.id);
    expect(r).toMatchObject({ status: 'resolved', remoteState: 'TASK_STATE_FAILED' });
    const timers = await timerSeconds(reg.id);
    expect(timers.slice(0, 6)).toEqual([30, 60, 120, 240, 240, 240]);
    expect(getTasks()).toBeGreaterThanOrEqual(8);
    expect((await feed()).map((f) => f.state)).toEqual(['TASK_STATE_FAILED']);
  });

  it('embedded: callbacks before the remote task id is known count once it arrives; then GetTask once', async () => {
    await setup();
    const reg = await register({ mode: 'embedded', agent: { url: agent!.url } });
    const cfg = reg.pushNotificationConfig;
    for (let i = 0; i < 3; i++)
      expect((await callback(cfg.url, cfg.authentication.credentials, { task: { id: 'rt-5' } })).status).toBe(
        200,
      );
    expect((await getReg(reg.id)).callbacks).toEqual({ received: 3, pending: 3, late: 0 });
    expect(getTasks()).toBe(0);
    agent!.setState('rt-5', 'TASK_STATE_INPUT_REQUIRED');
    const posted = await stack!.api(`/v1/registrations/${reg.id}/remote-task`, {
      method: 'POST',
      json: { remoteTaskId: 'rt-5' },
    });
    expect(posted.status).toBe(200);
    expect(await posted.json()).toMatchObject({ status: 'active', remoteTaskId: 'rt-5' });
    const again = await stack!.api(`/v1/registrations/${reg.id}/remote-task`, {
      method: 'POST',
      json: { remoteTaskId: 'rt-5' },
    });
    expect(again.status).toBe(200);
    const other = await stack!.api(`/v1/registrations/${reg.id}/remote-task`, {
      method: 'POST',
      json: { remoteTaskId: 'rt-x' },
    });
    expect(other.status).toBe(409);
    const g = await eventually(
      () => getReg(reg.id),
      (x) => x.callbacks.pending === 0,
    );
    expect(g).toMatchObject({
      status: 'active',
      remoteState: 'TASK_STATE_INPUT_REQUIRED',
      callbacks: { received: 3, pending: 0 },
    });
    // INPUT_REQUIRED is fed once, even when seen again.
    expect((await callback(cfg.url, cfg.authentication.credentials, { task: { id: 'rt-5' } })).status).toBe(
      200,
    );
    await eventually(
      () => getReg(reg.id),
      (x) => x.callbacks.pending === 0 && x.callbacks.received === 4,
    );
    agent!.setState('rt-5', 'TASK_STATE_COMPLETED');
    expect((await callback(cfg.url, cfg.authentication.credentials, { task: { id: 'rt-5' } })).status).toBe(
      200,
    );
    const r = await result(reg.id);
    expect(r.status).toBe('resolved');
    expect((await feed()).map((f) => [f.state, f.terminal])).toEqual([
      ['TASK_STATE_INPUT_REQUIRED', false],
      ['TASK_STATE_COMPLETED', true],
    ]);
    // A late callback after resolution: 200, counted, no row.
    expect((await callback(cfg.url, cfg.authentication.credentials, { task: { id: 'rt-5' } })).status).toBe(
      200,
    );
    expect((await getReg(reg.id)).callbacks).toMatchObject({ late: 1, pending: 0 });
  });

  it('DELETE ends the workflow and deletes the remote config; no feed item', async () => {
    await setup();
    agent!.setState('rt-6', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'separate', remoteTaskId: 'rt-6', agent: { url: agent!.url } });
    await eventually(
      async () => getTasks(),
      (n) => n >= 1,
    );
    expect(agent!.pushConfigs('rt-6')).toHaveLength(1);
    expect((await stack!.api(`/v1/registrations/${reg.id}`, { method: 'DELETE' })).status).toBe(204);
    const r = await result(reg.id);
    expect(r.status).toBe('deleted');
    expect(agent!.pushConfigs('rt-6')).toEqual([]);
    expect((await getReg(reg.id)).status).toBe('deleted');
    expect(await feed()).toEqual([]);
  });

  it('TaskNotFound ends the registration failed (remote_task_not_found) with one failed item', async () => {
    await setup();
    const reg = await register({
      mode: 'separate',
      remoteTaskId: 'no-such-task',
      agent: { url: agent!.url },
    });
    const r = await result(reg.id);
    expect(r).toMatchObject({ status: 'failed', reason: 'remote_task_not_found' });
    expect((await feed()).map((f) => [f.kind, f.reason, f.terminal])).toEqual([
      ['failed', 'remote_task_not_found', true],
    ]);
  });

  it('an agent the guard refuses at call time ends the registration failed (guard_refused:<rule>); no request reaches it', async () => {
    await setup({ env: { OUTBOUND_DENY_CIDRS: '127.0.0.1/32' }, apiEnv: { OUTBOUND_DENY_CIDRS: '' } });
    agent!.setState('rt-g', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'separate', remoteTaskId: 'rt-g', agent: { url: agent!.url } });
    const r = await result(reg.id);
    expect(r).toMatchObject({ status: 'failed' });
    expect(await getReg(reg.id)).toMatchObject({ status: 'failed', reason: 'guard_refused:denied_cidr' });
    expect((await feed()).map((f) => [f.kind, f.reason, f.terminal])).toEqual([
      ['failed', 'guard_refused:denied_cidr', true],
    ]);
    expect(agent!.calls).toEqual([]);
  });

  it('a 401 from the agent ends the registration failed (remote_auth_failed)', async () => {
    await setup({ agent: { requireBearer: 'right' } });
    agent!.setState('rt-7', 'TASK_STATE_WORKING');
    const reg = await register({
      mode: 'separate',
      remoteTaskId: 'rt-7',
      agent: { url: agent!.url, bearerToken: 'wrong' },
    });
    const r = await result(reg.id);
    expect(r).toMatchObject({ status: 'failed', reason: 'remote_auth_failed' });
  });

  it('an agent without push support is tracked by polling alone (pushEnabled false, push_not_supported)', async () => {
    await setup({ agent: { pushNotifications: false } });
    agent!.setState('rt-8', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'separate', remoteTaskId: 'rt-8', agent: { url: agent!.url } });
    const g = await eventually(
      () => getReg(reg.id),
      (x) => x.pushEnabled === false,
    );
    expect(g).toMatchObject({ status: 'active', pushEnabled: false, reason: 'push_not_supported' });
    agent!.setState('rt-8', 'TASK_STATE_CANCELED');
    expect((await result(reg.id)).status).toBe('resolved');
  });

  it('a push config create that fails otherwise is tracked by polling alone (pushEnabled false, remote_config_failed)', async () => {
    await setup({ agent: { refusePushConfigCreate: true } });
    agent!.setState('rt-8b', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'separate', remoteTaskId: 'rt-8b', agent: { url: agent!.url } });
    const g = await eventually(
      () => getReg(reg.id),
      (x) => x.pushEnabled === false,
    );
    expect(g).toMatchObject({ status: 'active', pushEnabled: false, reason: 'remote_config_failed' });
    // The agent was asked, and kept nothing.
    expect(agent!.calls.map((c) => c.kind)).toContain('createPushConfig');
    expect(agent!.pushConfigs('rt-8b')).toEqual([]);
    agent!.setState('rt-8b', 'TASK_STATE_COMPLETED');
    expect((await result(reg.id)).status).toBe('resolved');
  });

  it('after REGISTRATION_MAX_AGE without a terminal state it ends failed with expired', async () => {
    await setup({ env: { REGISTRATION_MAX_AGE: '1h' } });
    agent!.setState('rt-9', 'TASK_STATE_WORKING');
    const reg = await register({ mode: 'separate', remoteTaskId: 'rt-9', agent: { url: agent!.url } });
    const r = await result(reg.id);
    expect(r).toMatchObject({ status: 'failed', reason: 'expired' });
    expect((await feed()).map((f) => [f.kind, f.reason])).toEqual([['failed', 'expired']]);
    expect(agent!.pushConfigs('rt-9')).toEqual([]);
  });
});
