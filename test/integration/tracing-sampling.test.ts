/**
 * Whose sampled flag counts: with OTEL_TRACES_SAMPLER=parentbased_always_off the service samples only
 * what a trusted parent asks for. nr-llm's sampled traceparent on the API is such a parent; an agent's
 * sampled traceparent on a callback is not (the callback is a root, so the sampler says no).
 */
import crypto from 'node:crypto';
import { Agent, fetch as undiciFetch } from 'undici';
import { flushTracing, shutdownTracing, startTracing } from '../../src/tracing';
import { startTestAgent, type TestAgent } from '../helpers/agent';
import { connectDevServer, json, startStack, type Stack } from '../helpers/harness';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp';
import { makeTestTls } from '../helpers/tls';

jest.setTimeout(120_000);

const OTEL_ENV = {
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  OTEL_TRACES_SAMPLER: 'parentbased_always_off',
  OTEL_BSP_SCHEDULE_DELAY: '100',
};

let otlp: OtlpReceiver;
let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let agent: TestAgent;
const tlsAgent = new Agent({ connect: { ca: makeTestTls().caPem } });

beforeAll(async () => {
  otlp = await startOtlpReceiver();
  Object.assign(process.env, OTEL_ENV, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url });
  expect(startTracing('a2a-push')).toBe(true);
  temporal = await connectDevServer();
  agent = await startTestAgent();
  stack = await startStack(temporal, `sampling-${crypto.randomBytes(4).toString('hex')}`, { env: {} });
});
afterAll(async () => {
  await stack?.close();
  await agent?.close();
  await temporal?.close();
  await shutdownTracing();
  await otlp?.close();
  await tlsAgent.close();
  for (const k of [...Object.keys(OTEL_ENV), 'OTEL_EXPORTER_OTLP_ENDPOINT']) delete process.env[k];
});

const hex = (bytes: number) => crypto.randomBytes(bytes).toString('hex');

it("an agent's sampled flag forces no sampling; nr-llm's, a trusted parent's, does", async () => {
  const reg = (await json(
    stack.api('/v1/registrations', { method: 'POST', json: { mode: 'embedded', agent: { url: agent.url } } }),
  )) as { id: string; pushNotificationConfig: { authentication: { credentials: string } } };
  const agentTrace = hex(16);
  const cb = await undiciFetch(`${stack.inboxUrl}/a2a/push/${reg.id}`, {
    method: 'POST',
    dispatcher: tlsAgent,
    headers: {
      authorization: `Bearer ${reg.pushNotificationConfig.authentication.credentials}`,
      'content-type': 'application/json',
      traceparent: `00-${agentTrace}-${hex(8)}-01`,
    },
    body: JSON.stringify({ statusUpdate: { taskId: 'rt-s', status: { state: 'TASK_STATE_WORKING' } } }),
  });
  expect(cb.status).toBe(200);

  const nrLlmTrace = hex(16);
  const ev = await stack.api('/v1/tasks/task-s/events', {
    method: 'POST',
    json: { streamResponse: { task: { id: 'task-s' } } },
    headers: { traceparent: `00-${nrLlmTrace}-${hex(8)}-01` },
  });
  expect(ev.status).toBe(202);

  // The event write's trace is exported (the sampler followed nr-llm's flag) ...
  for (
    let i = 0;
    i < 100 && !otlp.spans.some((s) => s.traceId === nrLlmTrace && s.name === 'event write');
    i++
  ) {
    await flushTracing();
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(otlp.spans.filter((s) => s.traceId === nrLlmTrace).map((s) => s.name)).toEqual(
    expect.arrayContaining(['POST /v1/tasks/:taskId/events', 'event write']),
  );
  // ... and by then nothing of the callback, which came first: its root was not sampled.
  expect(otlp.spans.filter((s) => s.name.startsWith('POST /a2a/push') || s.name === 'inbox store')).toEqual(
    [],
  );
  expect(otlp.spans.filter((s) => s.links.some((l) => l.traceId === agentTrace))).toEqual([]);
});
