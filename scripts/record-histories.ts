/**
 * `npm run record:histories`: runs one delivery and one registration workflow per outcome on a real
 * Temporal dev server (embedded Postgres, the local HTTPS receiver and A2A agent of the tests), and
 * saves each history as JSON under test/replay/histories/. test/replay/replay.test.ts replays them with
 * the production workflow code, so a change that breaks determinism fails `npm test`.
 *
 * Workflows carry ids only: before saving, every payload of every history is checked for the secrets
 * and the event bodies this run used.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as prettier from 'prettier';
import { historyToObject } from '../test/replay/history-payloads';
import { startEmbeddedPostgres } from '../src/embedded/postgres';
import { startDevServer } from '../src/embedded/temporal';
import { makeDeliveryWorkflowId, makeRegistrationWorkflowId } from '../src/ids';
import { startTestAgent } from '../test/helpers/agent';
import { freePort } from '../test/helpers/test-services-port';
import { writeWorkflowBundle } from '../test/helpers/global-setup';
import {
  connectDevServer,
  createConfig,
  eventually,
  startStack,
  workflowResult,
  writeEvent,
  type Json,
} from '../test/helpers/harness';
import { startReceiver, type ScriptedAnswer } from '../test/helpers/receiver';
import { decodedPayloads } from '../test/replay/history-payloads';

const ROOT = path.resolve(__dirname, '..');
const OUT = path.join(ROOT, 'test', 'replay', 'histories');
const CREDENTIAL = `push-credential-${crypto.randomBytes(8).toString('hex')}`;
const AGENT_TOKEN = `agent-token-${crypto.randomBytes(8).toString('hex')}`;
const BODY_MARK = `body-mark-${crypto.randomBytes(8).toString('hex')}`;

/**
 * Delivery workflows are recorded as the lean type, every new delivery's (`delivery-lean-<outcome>`);
 * the classic type's `delivery-<outcome>` are the saved shapes of runs of the previous version, kept as
 * they are.
 */
const DELIVERY_PREFIX = 'delivery-lean-';
// RECORD_ONLY=name,name saves only those (the others keep their files: earlier shapes stay).
const only = process.env.RECORD_ONLY?.split(',').filter(Boolean);

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-record-'));
  const pg = await startEmbeddedPostgres({ dir: path.join(dir, 'pg'), port: await freePort(), fsync: false });
  const temporalServer = await startDevServer({ port: await freePort() });
  process.env.TEST_PG_ADMIN_URL = pg.url('postgres');
  process.env.TEST_TEMPORAL_ADDRESS = temporalServer.address;
  const bundlePath = path.join(dir, 'workflow-bundle.js');
  await writeWorkflowBundle(bundlePath);
  process.env.TEST_WORKFLOW_BUNDLE = bundlePath;

  const temporal = await connectDevServer();
  /** A workflow's result, once the dispatcher (or the inbox) has started it (within a minute). */
  const resultOf = (workflowId: string) =>
    workflowResult<{ status: string }>(temporal.client, workflowId, 60_000);
  const seen = new Map<string, number>();
  const receiver = await startReceiver({
    script: (req): ScriptedAnswer => {
      const id = String(req.headers['x-a2a-push-delivery']);
      const n = (seen.get(id) ?? 0) + 1;
      seen.set(id, n);
      switch (req.path) {
        case '/ok':
          return { status: 200 };
        case '/retry-once':
          return { status: n === 1 ? 503 : 200 };
        case '/always-503':
          return { status: 503 };
        case '/401':
          return { status: 401 };
        case '/410':
          return { status: 410 };
        case '/500':
          return { status: 500 };
        case '/302':
          return { status: 302, headers: { location: 'https://127.0.0.1:1/elsewhere' } };
        case '/retry-after-60':
          return { status: 503, headers: { 'retry-after': '60' } };
        case '/hang-once':
          return n === 1 ? { hang: true } : { status: 200 };
        default:
          return { status: 503, headers: { 'retry-after': '10' } };
      }
    },
  });
  const agent = await startTestAgent({ requireBearer: AGENT_TOKEN });
  const noPushAgent = await startTestAgent({ pushNotifications: false });
  const stack = await startStack(temporal, `record-${crypto.randomBytes(4).toString('hex')}`, {
    env: {
      DELIVERY_MAX_ATTEMPTS: '3',
      RETRY_INITIAL: '500ms',
      RETRY_FACTOR: '1',
      RETRY_MAX: '60s',
      DELIVERY_DEADLINE: '20s',
      DELIVERY_TIMEOUT: '2s',
      OUTBOX_BOUND_PER_CONFIG: '1',
      POLL_INITIAL: '1s',
      POLL_MAX: '2s',
    },
  });
  const histories: Array<{ name: string; workflowId: string }> = [];
  const base = receiver.url.replace(/\/hook$/, '');
  try {
    // ---- delivery workflows, one per outcome
    // `at`: the receiver's base URL (another receiver's for a first contact).
    const delivery = async (name: string, p: string, events = 1, at = base) => {
      const taskId = `task-${name}`;
      await createConfig(stack, taskId, {
        id: `cfg-${name}`,
        url: `${at}${p}`,
        authentication: { scheme: 'Bearer', credentials: CREDENTIAL },
      });
      const jobs: string[] = [];
      for (let i = 0; i < events; i++) {
        const ev = await writeEvent(stack, taskId, {
          statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' }, metadata: { mark: BODY_MARK } },
        });
        jobs.push(ev.deliveries[0]!.id);
        if (events > 1 && i === 0) await waitForStatus(jobs[0]!, 'waiting_retry');
      }
      return { taskId, configId: `cfg-${name}`, jobs };
    };
    const waitForStatus = (jobId: string, status: string) =>
      eventually(
        async () =>
          (await stack.tdb.db.query('SELECT status FROM delivery_jobs WHERE id = $1', [jobId])).rows[0]
            ?.status,
        (s) => s === status,
        60_000,
      );
    const finish = async (name: string, jobId: string, status: string) => {
      const r = await resultOf(makeDeliveryWorkflowId(jobId));
      if (r.status !== status) throw new Error(`${name}: expected ${status}, got ${r.status}`);
      histories.push({ name: `${DELIVERY_PREFIX}${name}`, workflowId: makeDeliveryWorkflowId(jobId) });
    };
    const simple: Array<[string, string, string]> = [
      ['delivered', '/ok', 'delivered'],
      ['delivered-after-retry', '/retry-once', 'delivered'],
      ['exhausted', '/always-503', 'exhausted'],
      ['auth-failed', '/401', 'auth_failed'],
      ['stopped', '/410', 'stopped'],
      ['failed', '/500', 'failed'],
      ['redirect', '/302', 'failed'],
      ['expired', '/retry-after-60', 'expired'],
    ];
    {
      // The fast lane takes only targets that answered a 2xx lately: one delivery (not saved) makes
      // the receiver known, so the histories below have their first attempts in the fast lane.
      const warm = await delivery('warm-up', '/ok');
      const r = await resultOf(makeDeliveryWorkflowId(warm.jobs[0]!));
      if (r.status !== 'delivered') throw new Error(`warm-up: ${r.status}`);
      // ...and the first contact with a target: the dispatcher starts it in the slow lane (`lane` in
      // its input), where its attempt runs. (`first-contact`, kept, is the shape before that hint: the
      // fast lane's call answered `slow` untried, then the attempt ran in the slow lane.)
      const fresh = await startReceiver({ script: () => ({ status: 200 }) });
      try {
        const d = await delivery('first-contact-hinted', '/ok', 1, fresh.url.replace(/\/hook$/, ''));
        await finish('first-contact-hinted', d.jobs[0]!, 'delivered');
      } finally {
        await fresh.close();
      }
    }
    await Promise.all(
      simple.map(async ([name, p, status]) => {
        const d = await delivery(name, p);
        await finish(name, d.jobs[0]!, status);
      }),
    );
    // Cancelled: the config is deleted during the backoff wait, whose wake signal ends it.
    const cancelled = await delivery('cancelled', '/wait');
    await waitForStatus(cancelled.jobs[0]!, 'waiting_retry');
    const del = await stack.api(
      `/v1/tasks/${cancelled.taskId}/pushNotificationConfigs/${cancelled.configId}`,
      {
        method: 'DELETE',
      },
    );
    if (del.status !== 204) throw new Error(`delete: ${del.status}`);
    await finish('cancelled', cancelled.jobs[0]!, 'cancelled');
    // Slow lane: the first attempt times out (DELIVERY_TIMEOUT 2 s), the second runs on the slow lane's queue.
    const slow = await delivery('slow-lane', '/hang-once');
    await finish('slow-lane', slow.jobs[0]!, 'delivered');
    // A slot wait: OUTBOUND_HOST_CONCURRENCY (8) calls held on the wire at another receiver; a ninth job
    // waits in line and is granted the first slot that frees.
    let open: () => void = () => undefined;
    const gate = new Promise<void>((r) => (open = r));
    const held = await startReceiver({ script: () => ({ status: 200, gate }) });
    try {
      const heldJobs: string[] = [];
      for (let i = 0; i < 9; i++) {
        const taskId = `task-slot-${i}`;
        await createConfig(stack, taskId, { id: 'cfg-slot', url: held.url });
        const ev = await writeEvent(stack, taskId, {
          statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' }, metadata: { mark: BODY_MARK } },
        });
        heldJobs.push(ev.deliveries[0]!.id);
        if (i === 7) await held.waitFor(8, 60_000);
      }
      const waiter = heldJobs[8]!;
      await eventually(
        async () =>
          // Places are held per attempt: the holder is `${jobId}:${n}` (src/activities/delivery.ts).
          (await stack.tdb.db.query('SELECT 1 FROM outbound_waiters WHERE holder = $1', [`${waiter}:1`]))
            .rowCount,
        (n) => n === 1,
        60_000,
      );
      open();
      await finish('slot-wait', waiter, 'delivered');
    } finally {
      open();
      await held.close();
    }
    // Superseded: a second event over the bound of 1 wakes the waiting first job, which ends.
    const sup = await delivery('superseded', '/wait', 2);
    await finish('superseded', sup.jobs[0]!, 'superseded');
    await stack.api(`/v1/tasks/${sup.taskId}/pushNotificationConfigs/${sup.configId}`, { method: 'DELETE' });
    // Ordered delivery: a second event of a config whose first push is on the wire (held there by the
    // receiver) waits for it ("waiting for delivery X", no attempt) and is woken when it ends. Over the
    // bound of 1 the first job is superseded mid-request: its attempt on the wire holds the line until
    // it returns (a 2xx, which lands).
    let openOrder: () => void = () => undefined;
    const orderGate = new Promise<void>((r) => (openOrder = r));
    const inLine = await startReceiver({
      script: (req) => (req.n === 1 ? { status: 200, gate: orderGate } : { status: 200 }),
    });
    try {
      const taskId = 'task-order-wait';
      await createConfig(stack, taskId, {
        id: 'cfg-order-wait',
        url: inLine.url,
        authentication: { scheme: 'Bearer', credentials: CREDENTIAL },
      });
      const event = () =>
        writeEvent(stack, taskId, {
          statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' }, metadata: { mark: BODY_MARK } },
        });
      const ahead = (await event()).deliveries[0]!.id;
      await inLine.waitFor(1, 60_000);
      const waiter = (await event()).deliveries[0]!.id;
      // Released as soon as the waiter's run waits for it: its start is delayed (one event in its
      // history, with the first workflow task's backoff), well inside DELIVERY_TIMEOUT (2 s).
      await eventually(
        async () =>
          (
            (
              await temporal.client.workflow
                .getHandle(makeDeliveryWorkflowId(waiter))
                .fetchHistory()
                // Not started yet (the dispatcher's start is under way).
                .catch(() => ({ events: [] }))
            ).events ?? []
          ).some(
            (e) =>
              Number(e.workflowExecutionStartedEventAttributes?.firstWorkflowTaskBackoff?.seconds ?? 0) > 0,
          ),
        (held) => held,
        60_000,
      );
      openOrder();
      // Started delayed (session 16): delivery-order-behind (the wait in the run, migration 017) and
      // delivery-order-wait (the activity's answer) are the shapes before that.
      await finish('order-delayed', waiter, 'delivered');
      const events =
        (await temporal.client.workflow.getHandle(makeDeliveryWorkflowId(waiter)).fetchHistory()).events ??
        [];
      const wakeAt = events.findIndex(
        (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'wake',
      );
      if (wakeAt < 0 || wakeAt > events.findIndex((e) => e.workflowTaskScheduledEventAttributes))
        throw new Error(`order-delayed: the waiter's start delay was not ended by the wake of ${ahead}`);
      if (inLine.requests.length !== 2)
        throw new Error(`order-wait: ${inLine.requests.length} pushes, not 2`);
    } finally {
      openOrder();
      await inLine.close();
    }

    // ---- registration workflows (not when RECORD_ONLY names none of them)
    if (!only || only.some((n) => n.startsWith('registration-'))) await recordRegistrations();
    async function recordRegistrations() {
      const register = async (body: Record<string, unknown>): Promise<Json> => {
        const res = await stack.api('/v1/registrations', { method: 'POST', json: body });
        const b: Json = await res.json();
        if (res.status !== 201) throw new Error(`register: ${res.status} ${JSON.stringify(b)}`);
        return b;
      };
      const endReg = async (name: string, id: string, status: string) => {
        const r = await resultOf(makeRegistrationWorkflowId(id));
        if (r.status !== status) throw new Error(`${name}: expected ${status}, got ${r.status}`);
        histories.push({ name: `registration-${name}`, workflowId: makeRegistrationWorkflowId(id) });
      };
      const getTasks = (a: typeof agent, remote: string) =>
        a.calls.filter(
          (c) => c.kind === 'getTask' && (JSON.stringify(c.body ?? '') + c.path).includes(remote),
        ).length;
      const agentRef = { url: agent.url, bearerToken: AGENT_TOKEN };

      // Separate, resolved by the agent's own push (a callback, then GetTask).
      agent.setState('rt-sep', 'TASK_STATE_WORKING');
      const sep = await register({ mode: 'separate', remoteTaskId: 'rt-sep', agent: agentRef });
      await eventually(
        async () => getTasks(agent, 'rt-sep'),
        (n) => n >= 1,
        60_000,
      );
      agent.setState('rt-sep', 'TASK_STATE_COMPLETED');
      await agent.push('rt-sep');
      await endReg('separate-resolved', sep.id, 'resolved');

      // Embedded: a callback while pending, then nr-llm posts the task id; GetTask says COMPLETED.
      agent.setState('rt-emb', 'TASK_STATE_INPUT_REQUIRED');
      const emb = await register({ mode: 'embedded', agent: agentRef });
      const cb = await fetch(emb.pushNotificationConfig.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${emb.pushNotificationConfig.authentication.credentials}`,
        },
        body: JSON.stringify({ statusUpdate: { taskId: 'rt-emb', metadata: { mark: BODY_MARK } } }),
      }).catch(() => undefined);
      void cb;
      const posted = await stack.api(`/v1/registrations/${emb.id}/remote-task`, {
        method: 'POST',
        json: { remoteTaskId: 'rt-emb' },
      });
      if (posted.status !== 200) throw new Error(`remote-task: ${posted.status}`);
      await eventually(
        async () => getTasks(agent, 'rt-emb'),
        (n) => n >= 1,
        60_000,
      );
      agent.setState('rt-emb', 'TASK_STATE_COMPLETED');
      await endReg('embedded-resolved', emb.id, 'resolved');

      // Drained: two callbacks arrive while a GetTask is under way; the workflow reconciles once more
      // for them a second later (drain-callbacks), then resolves on the agent's push.
      agent.setState('rt-drain', 'TASK_STATE_WORKING');
      const dr = await register({ mode: 'separate', remoteTaskId: 'rt-drain', agent: agentRef });
      await eventually(
        async () => getTasks(agent, 'rt-drain') >= 1 && agent.pushConfigs('rt-drain').length === 1,
        (ok) => ok,
        60_000,
      );
      const drCredential = agent.pushConfigs('rt-drain')[0]!.authentication!.credentials;
      const drCallback = () =>
        fetch(`${stack.inboxUrl}/a2a/push/${dr.id}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${drCredential}` },
          body: JSON.stringify({ statusUpdate: { taskId: 'rt-drain', metadata: { mark: BODY_MARK } } }),
        }).then((r) => {
          if (r.status !== 200) throw new Error(`drain callback: ${r.status}`);
        });
      const hold = agent.holdNextGetTask();
      await drCallback();
      await hold.reached;
      await drCallback();
      await drCallback();
      hold.release();
      await eventually(
        async () => getTasks(agent, 'rt-drain'),
        (n) => n >= 3,
        60_000,
      );
      agent.setState('rt-drain', 'TASK_STATE_COMPLETED');
      await agent.push('rt-drain');
      await endReg('drained', dr.id, 'resolved');

      // Failed: the agent does not know the task.
      const nf = await register({ mode: 'separate', remoteTaskId: 'rt-missing', agent: agentRef });
      await endReg('failed-not-found', nf.id, 'failed');

      // Deleted while it polls.
      agent.setState('rt-del', 'TASK_STATE_WORKING');
      const dl = await register({ mode: 'separate', remoteTaskId: 'rt-del', agent: agentRef });
      await eventually(
        async () => getTasks(agent, 'rt-del'),
        (n) => n >= 1,
        60_000,
      );
      await stack.api(`/v1/registrations/${dl.id}`, { method: 'DELETE' });
      await endReg('deleted', dl.id, 'deleted');

      // No push support: polling alone (two polls at least) finds the terminal state.
      noPushAgent.setState('rt-poll', 'TASK_STATE_WORKING');
      const np = await register({
        mode: 'separate',
        remoteTaskId: 'rt-poll',
        agent: { url: noPushAgent.url },
      });
      await eventually(
        async () => getTasks(noPushAgent, 'rt-poll'),
        (n) => n >= 2,
        60_000,
      );
      noPushAgent.setState('rt-poll', 'TASK_STATE_FAILED');
      await endReg('polled-no-push', np.id, 'resolved');
    }

    // ---- save, after checking that no history holds a secret or a body
    const secrets = [CREDENTIAL, AGENT_TOKEN, BODY_MARK, 'streamResponse', 'statusUpdate'];
    fs.mkdirSync(OUT, { recursive: true });
    // Files this run does not write stay: histories of earlier workflow versions keep replaying.
    for (const h of histories) {
      if (only && !only.includes(h.name)) continue;
      const history = await temporal.client.workflow.getHandle(h.workflowId).fetchHistory();
      const obj = historyToObject(history);
      const text = JSON.stringify(obj, null, 1);
      const all = [text, ...decodedPayloads(obj)].join('\n');
      for (const s of secrets) if (all.includes(s)) throw new Error(`${h.name}: history holds "${s}"`);
      // Saved as prettier formats it, so `npm test`'s prettier check passes on a fresh recording.
      const file = path.join(OUT, `${h.name}.json`);
      const options = (await prettier.resolveConfig(file)) ?? {};
      fs.writeFileSync(file, await prettier.format(text, { ...options, filepath: file }));
      process.stdout.write(`saved ${h.name} (${history.events?.length ?? 0} events)\n`);
    }
  } finally {
    await stack.close();
    await agent.close();
    await noPushAgent.close();
    await receiver.close();
    await temporal.close();
    await temporalServer.stop();
    await pg.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
