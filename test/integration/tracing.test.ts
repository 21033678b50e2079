/**
 * Traces end to end: the service with OTEL_* settings exports its spans over OTLP/HTTP (JSON) to a real
 * receiver in this test; the span tree of one delivery and of one callback are read from what it got.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { Agent, fetch as undiciFetch } from 'undici';
import { createLogger } from '../../src/logger';
import { flushTracing, shutdownTracing, startTracing, temporalWorkerTracing } from '../../src/tracing';
import { DELIVERY_WORKFLOW_TYPE } from '../../src/starts/client';
import { startTestAgent, type TestAgent } from '../helpers/agent';
import { ROOT, writeWorkflowBundle } from '../helpers/global-setup';
import {
  connectDevServer,
  createConfig,
  eventually,
  json,
  markTargetAnswered,
  sideRelay,
  startStack,
  type Stack,
} from '../helpers/harness';
import { SPAN_KIND, startOtlpReceiver, type ExportedSpan, type OtlpReceiver } from '../helpers/otlp';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { makeTestTls } from '../helpers/tls';

jest.setTimeout(180_000);

const OTEL_ENV = {
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  OTEL_SERVICE_NAME: 'a2a-push-test',
  OTEL_BSP_SCHEDULE_DELAY: '100',
};

// Every line the service logs, parsed (the service's own logger: redaction and trace ids).
const lines: Array<Record<string, unknown>> = [];
const sink = new Writable({
  write(chunk: Buffer, _enc, cb) {
    for (const l of chunk.toString().split('\n').filter(Boolean))
      lines.push(JSON.parse(l) as Record<string, unknown>);
    cb();
  },
});

let otlp: OtlpReceiver;
let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let receiver: Receiver;
let agent: TestAgent;
const taskQueue = `tracing-${crypto.randomBytes(4).toString('hex')}`;
const tlsAgent = new Agent({ connect: { ca: makeTestTls().caPem } });
const bundle = path.join(ROOT, '.test-tmp', `workflow-bundle-otel-${process.pid}.js`);

beforeAll(async () => {
  otlp = await startOtlpReceiver();
  Object.assign(process.env, OTEL_ENV, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url });
  expect(startTracing('a2a-push')).toBe(true);
  // The worker's workflow code with Temporal's OpenTelemetry workflow interceptors, as a worker with
  // OTEL_* settings bundles it.
  await writeWorkflowBundle(bundle, temporalWorkerTracing()!.workflowModules);
  temporal = await connectDevServer();
  receiver = await startReceiver();
  agent = await startTestAgent();
  stack = await startStack(temporal, taskQueue, {
    env: {},
    workflowBundle: bundle,
    logger: createLogger('debug', 'a2a-push', sink),
  });
  // A receiver that answered lately: the attempts run in the fast lane.
  await markTargetAnswered(stack.tdb.db, receiver.url);
});
afterAll(async () => {
  await stack?.close();
  await agent?.close();
  await receiver?.close();
  await temporal?.close();
  await shutdownTracing();
  await otlp?.close();
  await tlsAgent.close();
  fs.rmSync(bundle, { force: true });
  for (const k of [...Object.keys(OTEL_ENV), 'OTEL_EXPORTER_OTLP_ENDPOINT']) delete process.env[k];
});

/** The delivery workflow type every relay starts. */
const deliveryType = () => DELIVERY_WORKFLOW_TYPE;

const hex = (bytes: number) => crypto.randomBytes(bytes).toString('hex');

/** The spans of one trace once `done` holds for them (the exporter sends in batches). */
async function traceOf(traceId: string, done: (spans: ExportedSpan[]) => boolean): Promise<ExportedSpan[]> {
  return eventually(async () => {
    await flushTracing();
    return otlp.spans.filter((s) => s.traceId === traceId);
  }, done);
}

const one = (spans: ExportedSpan[], name: string, parent?: ExportedSpan): ExportedSpan => {
  const found = spans.filter((s) => s.name === name && (!parent || s.parentSpanId === parent.spanId));
  if (found.length !== 1)
    throw new Error(
      `expected one span "${name}"${parent ? ` under "${parent.name}"` : ''}, found ${found.length}: ${spans
        .map((s) => `${s.name} (${s.spanId} ← ${s.parentSpanId ?? '-'})`)
        .join(', ')}`,
    );
  return found[0]!;
};

/** The trace as an indented tree of names and durations (written to test-output/ for reading). */
function render(spans: ExportedSpan[]): string {
  const children = (id: string | undefined) =>
    spans.filter(
      (s) => s.parentSpanId === id || (id === undefined && !spans.some((p) => p.spanId === s.parentSpanId)),
    );
  const out: string[] = [];
  const walk = (s: ExportedSpan, depth: number) => {
    out.push(`${'  '.repeat(depth)}${s.name}  ${s.durationMs.toFixed(1)} ms  [${s.service}]`);
    for (const c of children(s.spanId)) walk(c, depth + 1);
  };
  for (const r of children(undefined)) walk(r, 0);
  return out.join('\n');
}

function keep(name: string, text: string) {
  const dir = path.join(ROOT, 'test-output', 'traces');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, name), text + '\n');
}

/** What no span may contain anywhere: names, attributes, events, links. */
function expectNoneOf(spans: ExportedSpan[], secrets: string[]) {
  const text = JSON.stringify(spans);
  for (const s of secrets) expect(text).not.toContain(s);
}

// The delivery workflow (its attempt a local activity): its spans.
it.each(['lean'] as const)(
  "%s: one delivery is one trace under nr-llm's span: request, event write, start, workflow, attempt, POST; the receiver's traceparent is the POST's",
  async (kind) => {
    const startedType = DELIVERY_WORKFLOW_TYPE;
    const task = `task-tr-${kind}`;
    const pathToken = `hook-${hex(8)}`;
    const queryToken = `sig-${hex(8)}`;
    await createConfig(stack, task, {
      id: 'c1',
      url: `https://127.0.0.1:${receiver.port}/${pathToken}?sig=${queryToken}`,
      token: 'tok-never-in-a-span',
      authentication: { scheme: 'Bearer', credentials: 'cred-never-in-a-span' },
    });
    const traceId = hex(16);
    const nrLlmSpan = hex(8);
    const res = await stack.api(`/v1/tasks/${task}/events`, {
      method: 'POST',
      json: { streamResponse: { task: { id: task, marker: 'body-never-in-a-span' } } },
      headers: { traceparent: `00-${traceId}-${nrLlmSpan}-01`, tracestate: 'nrllm=state-never-sent-out' },
    });
    expect(res.status).toBe(202);
    const id = ((await res.json()) as { deliveries: Array<{ id: string }> }).deliveries[0]!.id;
    await eventually(
      () => json(stack.api(`/v1/deliveries/${id}`)),
      (d) => d.status === 'delivered',
    );

    // The workflow's spans come once it has ended (the worker exports them from the workflow sandbox).
    const spans = await traceOf(traceId, (ss) =>
      ['POST', `RunWorkflow:${startedType}`, 'StartActivity:attemptDelivery'].every((n) =>
        ss.some((s) => s.name === n),
      ),
    );
    // The tree, each span under the one before it (nr-llm's span is the root's parent).
    const request = one(spans, 'POST /v1/tasks/:taskId/events');
    expect(request.parentSpanId).toBe(nrLlmSpan);
    expect(request.kind).toBe(SPAN_KIND.server);
    expect(request.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/v1/tasks/:taskId/events',
      'http.response.status_code': 202,
      'url.scheme': 'http',
    });
    const write = one(spans, 'event write', request);
    expect(write.attributes).toMatchObject({ 'a2a_push.deliveries': 1, 'a2a_push.task_id': task });
    const dispatch = one(spans, 'dispatch', request);
    expect(dispatch.attributes).toMatchObject({ 'a2a_push.dispatch.path': 'direct', 'a2a_push.job_id': id });
    const start = one(spans, `StartWorkflow:${startedType}`, dispatch);
    const run = one(spans, `RunWorkflow:${startedType}`, start);
    const schedule = one(spans, 'StartActivity:attemptDelivery', run);
    const attempt = one(spans, 'RunActivity:attemptDelivery', schedule);
    const post = one(spans, 'POST', attempt);
    expect(post.kind).toBe(SPAN_KIND.client);
    // The push's URL: scheme, host and port only.
    expect(post.attributes).toEqual({
      'http.request.method': 'POST',
      'url.scheme': 'https',
      'server.address': '127.0.0.1',
      'server.port': receiver.port,
      'http.response.status_code': 200,
    });

    // The receiver can join the trace: its traceparent is the POST span's; nr-llm's tracestate stays in.
    const got = receiver.requests.find((r) => r.headers['x-a2a-push-delivery'] === id)!;
    expect(got.headers.traceparent).toBe(`00-${traceId}-${post.spanId}-01`);
    expect(got.headers.tracestate).toBeUndefined();

    expectNoneOf(spans, [
      pathToken,
      queryToken,
      'tok-never-in-a-span',
      'cred-never-in-a-span',
      'body-never-in-a-span',
      'state-never-sent-out',
      stack.apiKey,
    ]);
    // Log lines written inside a span carry its trace id: the attempt's, and the request's own line.
    const attemptLine = lines.find((l) => l.msg === 'delivery attempt' && l.jobId === id);
    expect(attemptLine).toMatchObject({ traceId, spanId: attempt.spanId });
    const requestLine = lines.find(
      (l) => l.msg === 'request completed' && (l.req as { url?: string }).url === `/v1/tasks/${task}/events`,
    );
    expect(requestLine).toMatchObject({ traceId });
    keep(kind === 'lean' ? 'delivery.txt' : 'delivery-classic.txt', render(spans));
  },
);

it("a callback starts its own trace and only links the agent's traceparent; the reconcile links the callbacks it covers; agent calls carry traceparent", async () => {
  agent.setState('rt-tr', 'TASK_STATE_WORKING');
  const reg = (await json(
    stack.api('/v1/registrations', {
      method: 'POST',
      json: { mode: 'embedded', agent: { url: agent.url, bearerToken: 'agent-token-never-in-a-span' } },
    }),
  )) as { id: string; pushNotificationConfig: { authentication: { credentials: string } } };
  const credential = reg.pushNotificationConfig.authentication.credentials;
  // The agent's traceparent, sampled: untrusted, it is no parent and forces nothing.
  const agentTrace = hex(16);
  const agentSpan = hex(8);
  const cb = await undiciFetch(`${stack.inboxUrl}/a2a/push/${reg.id}`, {
    method: 'POST',
    dispatcher: tlsAgent,
    headers: {
      authorization: `Bearer ${credential}`,
      'content-type': 'application/json',
      traceparent: `00-${agentTrace}-${agentSpan}-01`,
      tracestate: 'agent=whatever',
    },
    body: JSON.stringify({
      statusUpdate: {
        taskId: 'rt-tr',
        status: { state: 'TASK_STATE_WORKING' },
        m: 'cb-body-never-in-a-span',
      },
    }),
  });
  expect(cb.status).toBe(200);
  await flushTracing();
  const callback = await eventually(
    async () => {
      await flushTracing();
      return otlp.spans.find(
        (s) => s.name === 'POST /a2a/push/:registrationId' && s.links.some((l) => l.spanId === agentSpan),
      );
    },
    (s) => s !== undefined,
  );
  expect(callback!.traceId).not.toBe(agentTrace);
  expect(callback!.parentSpanId).toBeUndefined();
  expect(callback!.links).toEqual([
    { traceId: agentTrace, spanId: agentSpan, attributes: { 'a2a_push.link': 'caller_traceparent' } },
  ]);
  expect(otlp.spans.filter((s) => s.traceId === agentTrace)).toEqual([]);
  const cbSpans = await traceOf(callback!.traceId, (ss) => ss.some((s) => s.name === 'inbox store'));
  const store = one(cbSpans, 'inbox store', callback);
  expect(store.links.map((l) => l.spanId)).toEqual([callback!.spanId]);

  // The task id arrives: the workflow's GetTask covers the callback stored before it.
  const start = agent.calls.length;
  expect(
    (
      await stack.api(`/v1/registrations/${reg.id}/remote-task`, {
        method: 'POST',
        json: { remoteTaskId: 'rt-tr' },
      })
    ).status,
  ).toBe(200);
  const getTask = await eventually(
    async () => agent.calls.slice(start).find((c) => c.kind === 'getTask'),
    (c) => c !== undefined,
  );
  const reconcile = await eventually(
    async () => {
      await flushTracing();
      return otlp.spans.find(
        (s) => s.name === 'reconcile' && s.links.some((l) => l.spanId === callback!.spanId),
      );
    },
    (s) => s !== undefined,
  );
  expect(reconcile!.links).toEqual([
    { traceId: callback!.traceId, spanId: callback!.spanId, attributes: {} },
  ]);
  // The GetTask carried traceparent: a client span under the reconcile, in its trace; no tracestate.
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(getTask!.traceparent ?? '');
  expect(m).not.toBeNull();
  expect(m![1]).toBe(reconcile!.traceId);
  expect(getTask!.tracestate).toBeUndefined();
  // The call's span and the activity's (which ends last) are exported.
  const regSpans = await traceOf(reconcile!.traceId, (ss) =>
    [m![2], reconcile!.parentSpanId].every((id) => ss.some((s) => s.spanId === id)),
  );
  const call = regSpans.find((s) => s.spanId === m![2])!;
  expect(call).toMatchObject({ name: 'POST', kind: SPAN_KIND.client });
  expect(call.parentSpanId).toBe(reconcile!.spanId);
  expect(regSpans.find((s) => s.spanId === reconcile!.parentSpanId)!.name).toBe('RunActivity:reconcile');
  expectNoneOf(
    [...cbSpans, ...regSpans],
    [credential, 'agent-token-never-in-a-span', 'cb-body-never-in-a-span', `/a2a/push/${reg.id}`],
  );
  keep('callback.txt', render(cbSpans));
  keep('registration.txt', render(regSpans));
});

it("a job started by a relay's claim joins the trace of the request that wrote it (kept on the job row)", async () => {
  await createConfig(stack, 'task-claim', { id: 'c1', url: receiver.url });
  // With the process's relay stopped, the write leaves its job to a claim run (no lease).
  await stack.relay.stop();
  const traceId = hex(16);
  const res = await stack.api('/v1/tasks/task-claim/events', {
    method: 'POST',
    json: { streamResponse: { task: { id: 'task-claim' } } },
    headers: { traceparent: `00-${traceId}-${hex(8)}-01` },
  });
  expect(res.status).toBe(202);
  const id = ((await res.json()) as { deliveries: Array<{ id: string }> }).deliveries[0]!.id;
  const row = await stack.tdb.db.query<{ traceparent: string | null; dispatched_at: Date | null }>(
    'SELECT traceparent, dispatched_at FROM delivery_jobs WHERE id = $1',
    [id],
  );
  expect(row.rows[0]!.dispatched_at).toBeNull();
  expect(row.rows[0]!.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
  // Another process's relay claims it.
  const other = sideRelay(stack, temporal.client, taskQueue);
  other.kick();
  await eventually(
    () => json(stack.api(`/v1/deliveries/${id}`)),
    (d) => d.status === 'delivered',
  );
  await other.stop();
  const spans = await traceOf(traceId, (ss) =>
    ['POST /v1/tasks/:taskId/events', 'dispatch', `StartWorkflow:${deliveryType()}`].every((n) =>
      ss.some((s) => s.name === n),
    ),
  );
  const request = one(spans, 'POST /v1/tasks/:taskId/events');
  const dispatch = one(spans, 'dispatch', request);
  expect(dispatch.attributes['a2a_push.dispatch.path']).toBe('claim');
  one(spans, `StartWorkflow:${deliveryType()}`, dispatch);
});
