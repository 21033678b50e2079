/**
 * Sender interop: every push our delivery workflow makes is parsed by receivers built from the two
 * reference SDKs' own types — `StreamResponse.fromJSON` of @a2a-js/sdk 1.3.0, and protobuf's JSON
 * parser over the Python a2a-sdk 1.3.0's `StreamResponse` (strict: an unknown field fails) — for each
 * of the four payload kinds, with every field value intact.
 */
import crypto from 'node:crypto';
import { StreamResponse, taskStateToJSON } from '@a2a-js/sdk';
import { startPythonReceiver, type PythonReceiver } from '../helpers/python';
import { startReceiver, type Receiver, type ReceivedRequest } from '../helpers/receiver';
import {
  connectDevServer,
  createConfig,
  eventually,
  json,
  startStack,
  writeEvent,
  type Json,
  type Stack,
} from '../helpers/harness';
import { writeMeasurements } from './peers';

jest.setTimeout(60_000);

const AT = '2026-01-02T03:04:05.678Z';
/** One StreamResponse of each kind, with nested messages, parts of every content type, metadata. */
const PAYLOADS: Record<string, (taskId: string) => Record<string, unknown>> = {
  task: (taskId) => ({
    task: {
      id: taskId,
      contextId: 'ctx-interop',
      status: {
        state: 'TASK_STATE_COMPLETED',
        message: { messageId: 'm-status', role: 'ROLE_AGENT', parts: [{ text: 'done' }] },
        timestamp: AT,
      },
      artifacts: [
        {
          artifactId: 'a-1',
          name: 'report',
          description: 'the result',
          parts: [
            { text: 'hello', mediaType: 'text/plain' },
            { data: { k: [1, 2.5, { x: 'y' }], ok: true, none: null } },
          ],
          metadata: { pages: 3 },
        },
      ],
      history: [{ messageId: 'm-1', contextId: 'ctx-interop', role: 'ROLE_USER', parts: [{ text: 'hi' }] }],
      metadata: { source: 'nr-llm', n: 3 },
    },
  }),
  message: (taskId) => ({
    message: {
      messageId: 'm-2',
      contextId: 'ctx-interop',
      taskId,
      role: 'ROLE_AGENT',
      parts: [
        { text: 'ünïcödé ✓ "quoted" \\ slash' },
        { url: 'https://files.example.com/a.pdf', mediaType: 'application/pdf', filename: 'a.pdf' },
      ],
      metadata: { lang: 'de' },
      extensions: ['urn:example:ext'],
      referenceTaskIds: ['task-0'],
    },
  }),
  statusUpdate: (taskId) => ({
    statusUpdate: {
      taskId,
      contextId: 'ctx-interop',
      status: {
        state: 'TASK_STATE_INPUT_REQUIRED',
        message: { messageId: 'm-3', role: 'ROLE_AGENT', parts: [{ text: 'which file?' }] },
        timestamp: AT,
      },
      metadata: { step: 2 },
    },
  }),
  artifactUpdate: (taskId) => ({
    artifactUpdate: {
      taskId,
      contextId: 'ctx-interop',
      artifact: {
        artifactId: 'a-2',
        name: 'chunk',
        parts: [{ raw: 'aGVsbG8gd29ybGQ=', mediaType: 'text/plain' }],
      },
      append: true,
      lastChunk: true,
      metadata: { chunk: 7 },
    },
  }),
};
const KINDS = Object.keys(PAYLOADS);
const PYTHON_FIELD: Record<string, string> = {
  task: 'task',
  message: 'message',
  statusUpdate: 'status_update',
  artifactUpdate: 'artifact_update',
};

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let jsReceiver: Receiver;
let pyReceiver: PythonReceiver;
/** What the JS receiver parsed, by request number */
const jsParsed = new Map<number, StreamResponse | Error>();
const CREDENTIAL = 'sender-interop-credential';
const run = crypto.randomBytes(3).toString('hex');
const sent: Array<{ kind: string; taskId: string; body: Record<string, unknown>; deliveries: Json[] }> = [];

beforeAll(async () => {
  temporal = await connectDevServer();
  stack = await startStack(temporal, `interop-tx-${run}`, { env: {} });
  // The JS receiver: the SDK's own StreamResponse.fromJSON; a body it cannot take is answered 400.
  jsReceiver = await startReceiver({
    path: '/a2a-js',
    script: (req: ReceivedRequest) => {
      try {
        jsParsed.set(req.n, StreamResponse.fromJSON(JSON.parse(req.body.toString('utf8'))));
        return { status: 200, body: '' };
      } catch (err) {
        jsParsed.set(req.n, err as Error);
        return { status: 400, body: String(err) };
      }
    },
  });
  pyReceiver = await startPythonReceiver();
  for (const kind of KINDS) {
    const taskId = `interop-${kind}-${run}`;
    await createConfig(stack, taskId, {
      id: 'js',
      url: jsReceiver.url,
      token: 'kept-not-sent',
      authentication: { scheme: 'Bearer', credentials: CREDENTIAL },
    });
    await createConfig(stack, taskId, {
      id: 'python',
      url: `${pyReceiver.url}/a2a-python`,
      token: 'kept-not-sent',
      authentication: { scheme: 'Bearer', credentials: CREDENTIAL },
    });
    const body = PAYLOADS[kind]!(taskId);
    const { deliveries } = await writeEvent(stack, taskId, body);
    sent.push({ kind, taskId, body, deliveries });
  }
  await jsReceiver.waitFor(KINDS.length, 30_000);
  await eventually(
    () => pyReceiver.received(),
    (r) => r.length >= KINDS.length,
    30_000,
  );
});
afterAll(async () => {
  await stack?.close();
  await temporal?.close();
  await jsReceiver?.close();
  await pyReceiver?.close();
});

const taskIdOf = (body: string): string => {
  const v = Object.values(JSON.parse(body) as Record<string, Json>)[0];
  return v.taskId ?? v.id;
};

describe('our pushes, parsed by each reference SDK’s own StreamResponse', () => {
  it.each(KINDS)('@a2a-js/sdk StreamResponse.fromJSON takes the %s push with every field intact', (kind) => {
    const s = sent.find((x) => x.kind === kind)!;
    const req = jsReceiver.requests.find((r) => taskIdOf(r.body.toString('utf8')) === s.taskId)!;
    expect(req).toBeDefined();
    // Byte for byte what nr-llm wrote, parsed by the SDK, and back to the same JSON.
    expect(req.body.toString('utf8')).toBe(JSON.stringify(s.body));
    const parsed = jsParsed.get(req.n);
    expect(parsed).not.toBeInstanceOf(Error);
    const msg = parsed as StreamResponse;
    expect(msg.payload?.$case).toBe(kind);
    expect(StreamResponse.toJSON(msg)).toEqual(s.body);
    const p = msg.payload!;
    if (p.$case === 'task') {
      expect(taskStateToJSON(p.value.status!.state)).toBe('TASK_STATE_COMPLETED');
      expect(p.value.artifacts[0]!.parts[1]!.content).toEqual({
        $case: 'data',
        value: { k: [1, 2.5, { x: 'y' }], ok: true, none: null },
      });
    } else if (p.$case === 'statusUpdate') {
      expect(taskStateToJSON(p.value.status!.state)).toBe('TASK_STATE_INPUT_REQUIRED');
      expect(p.value.status!.timestamp).toBe(AT);
    } else if (p.$case === 'artifactUpdate') {
      expect(p.value.artifact!.parts[0]!.content?.$case).toBe('raw');
      expect(
        Buffer.from((p.value.artifact!.parts[0]!.content as { value: Uint8Array }).value).toString(),
      ).toBe('hello world');
      expect(p.value.lastChunk).toBe(true);
    } else {
      expect(p.value.parts[0]!.content).toEqual({ $case: 'text', value: 'ünïcödé ✓ "quoted" \\ slash' });
      expect(p.value.referenceTaskIds).toEqual(['task-0']);
    }
  });

  it.each(KINDS)(
    'a2a-sdk (Python) protobuf JSON parsing takes the %s push with every field intact',
    async (kind) => {
      const s = sent.find((x) => x.kind === kind)!;
      const rec = (await pyReceiver.received()).find((r) => taskIdOf(r.body) === s.taskId)!;
      expect(rec).toBeDefined();
      expect(rec.error).toBeUndefined();
      expect(rec.body).toBe(JSON.stringify(s.body));
      expect(rec.payload).toBe(PYTHON_FIELD[kind]);
      // MessageToDict writes the parsed message back as ProtoJSON: the same value as sent.
      expect(rec.parsed).toEqual(s.body);
    },
  );

  it('each SDK receiver saw our headers: a2a+json, the Bearer credential, A2A-Version 1.0, the delivery id; never the token', async () => {
    const py = await pyReceiver.received();
    const measured: Record<string, unknown> = {};
    for (const s of sent) {
      const jsReq = jsReceiver.requests.find((r) => taskIdOf(r.body.toString('utf8')) === s.taskId)!;
      const pyRec = py.find((r) => taskIdOf(r.body) === s.taskId)!;
      for (const [name, headers] of [
        ['js', jsReq.headers],
        ['python', pyRec.headers],
      ] as const) {
        const configId = name;
        const delivery = s.deliveries.find((d) => d.configId === configId)!;
        expect(headers).toMatchObject({
          'content-type': 'application/a2a+json',
          authorization: `Bearer ${CREDENTIAL}`,
          'a2a-version': '1.0',
          'x-a2a-push-delivery': delivery.id,
        });
        expect(headers['user-agent']).toMatch(/^a2a-push\//);
        expect(headers['x-a2a-notification-token']).toBeUndefined();
        expect(JSON.stringify(headers)).not.toContain('kept-not-sent');
        const d = await json(stack.api(`/v1/deliveries/${delivery.id}`));
        expect(d).toMatchObject({ status: 'delivered', reason: 'http_200' });
        measured[name] = Object.keys(headers).sort();
      }
    }
    writeMeasurements('sender', { headerNames: measured, kinds: KINDS });
  });
});
