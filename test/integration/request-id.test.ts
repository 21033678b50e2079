import crypto from 'node:crypto';
import { Writable } from 'node:stream';
import pino from 'pino';
import { REDACT_PATHS } from '../../src/logger';
import { startTestAgent, type TestAgent } from '../helpers/agent';
import {
  connectDevServer,
  createConfig,
  eventually,
  json,
  quietTemporal,
  markTargetAnswered,
  startStack,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

jest.setTimeout(60_000);

// Every line the service logs, parsed, through the same redaction the processes use.
const lines: Array<Record<string, unknown>> = [];
const sink = new Writable({
  write(chunk: Buffer, _enc, cb) {
    for (const l of chunk.toString().split('\n').filter(Boolean))
      lines.push(JSON.parse(l) as Record<string, unknown>);
    cb();
  },
});
const logger = pino({ level: 'debug', redact: { paths: REDACT_PATHS, censor: '[redacted]' } }, sink);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let shared: Stack;
let receiver: Receiver;
let agent: TestAgent;

beforeAll(async () => {
  // The SDK's logger goes to the same sink, so the workflows' own lines can be read too.
  quietTemporal(logger);
  temporal = await connectDevServer();
  receiver = await startReceiver();
  agent = await startTestAgent();
  shared = await startStack(temporal, `reqid-${crypto.randomBytes(4).toString('hex')}`, { env: {}, logger });
});
afterAll(async () => {
  await shared?.close();
  await agent?.close();
  await receiver?.close();
  await temporal?.close();
});

// lean: the attempt is a local activity, which gets the header from the workflow interceptor too.
it.each(['classic', 'lean'] as const)(
  "%s: an event write's request id reaches the delivery activity's log lines; no secret reaches any line",
  async (kind) => {
    // A stack of each type's own (the shared one runs the default type).
    const stack = await startStack(temporal, `reqid-${kind}-${crypto.randomBytes(4).toString('hex')}`, {
      env: { DELIVERY_WORKFLOW: kind },
      logger,
    });
    // A target that answered lately, so the attempt runs in the fast lane (lean: the local activity
    // this test is about).
    await markTargetAnswered(stack.tdb.db, receiver.url);
    const task = `task-rid-${kind}`;
    const rid = `req-event-42-${kind}`;
    try {
      await createConfig(stack, task, {
        id: 'c',
        url: receiver.url,
        token: 'tok-never-logged',
        authentication: { scheme: 'Bearer', credentials: 'cred-never-logged' },
      });
      const res = await stack.api(`/v1/tasks/${task}/events`, {
        method: 'POST',
        json: { streamResponse: { task: { id: task } } },
        headers: { 'x-request-id': rid },
      });
      expect(res.status).toBe(202);
      expect(res.headers.get('x-request-id')).toBe(rid);
      const { deliveries } = (await res.json()) as { deliveries: Array<{ id: string }> };
      const id = deliveries[0]!.id;
      await eventually(
        () => json(stack.api(`/v1/deliveries/${id}`)),
        (d) => d.status === 'delivered',
      );
      const attempt = await eventually(
        async () => lines.find((l) => l.msg === 'delivery attempt' && l.jobId === id),
        (l) => l !== undefined,
      );
      expect(attempt).toMatchObject({
        requestId: rid,
        workflowId: `delivery-${id}`,
        activity: 'attemptDelivery',
        outcome: 'delivered',
      });
      // The workflow's own log line carries the request id too (the workflow interceptor's log attributes).
      const finished = await eventually(
        async () =>
          lines.find(
            (l) => l.message === 'delivery finished' || (l.msg === 'delivery finished' && l.jobId === id),
          ),
        (l) => l !== undefined,
      );
      expect(finished).toMatchObject({
        requestId: rid,
        workflowId: `delivery-${id}`,
        status: 'delivered',
      });
      const http = lines.find((l) => (l.req as { id?: string } | undefined)?.id === rid);
      expect(http).toBeDefined();
      const text = JSON.stringify(lines);
      expect(text).not.toContain('cred-never-logged');
      expect(text).not.toContain('tok-never-logged');
      expect(text).not.toContain(stack.apiKey);
    } finally {
      await stack.close();
    }
  },
);

it("a registration's request id reaches its workflow's activities", async () => {
  agent.setState('rt-rid', 'TASK_STATE_WORKING');
  const res = await shared.api('/v1/registrations', {
    method: 'POST',
    json: {
      mode: 'separate',
      remoteTaskId: 'rt-rid',
      agent: { url: agent.url, bearerToken: 'agent-token-never-logged' },
    },
    headers: { 'x-request-id': 'req-reg-7' },
  });
  expect(res.status).toBe(201);
  const reg = (await res.json()) as { id: string };
  await eventually(
    () => json(shared.api(`/v1/registrations/${reg.id}`)),
    (r) => r.remoteState === 'TASK_STATE_WORKING',
  );
  const done = await eventually(
    async () =>
      lines.filter((l) => l.workflowId === `registration-${reg.id}` && l.msg === 'activity completed'),
    (ls) => ls.length >= 2,
  );
  expect(done.every((l) => l.requestId === 'req-reg-7')).toBe(true);
  expect(done.map((l) => l.activity)).toEqual(
    expect.arrayContaining(['loadRegistration', 'setupRemotePushConfig']),
  );
  expect(JSON.stringify(lines)).not.toContain('agent-token-never-logged');
});

it('the logger redacts authorization headers, credentials and tokens wherever they appear', () => {
  const before = lines.length;
  logger.info(
    {
      req: { headers: { authorization: 'Bearer leak-1', 'x-a2a-notification-token': 'leak-2' } },
      authentication: { scheme: 'Bearer', credentials: 'leak-3' },
      config: { token: 'leak-4', authentication: { credentials: 'leak-5' } },
      agent: { bearerToken: 'leak-6' },
    },
    'redaction probe',
  );
  const line = JSON.stringify(lines.slice(before));
  expect(line).toContain('redaction probe');
  for (let i = 1; i <= 6; i++) expect(line).not.toContain(`leak-${i}`);
});
