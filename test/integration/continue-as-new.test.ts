import { freePort } from '../helpers/test-services-port';
import crypto from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { startDevServer, type DevServer } from '../../src/embedded/temporal';
import { makeRegistrationWorkflowId } from '../../src/ids';
import { startTestAgent, type TestAgent } from '../helpers/agent';
import { eventually, json, quietTemporal, startStack, type Stack } from '../helpers/harness';

jest.setTimeout(90_000);

let server: DevServer | undefined;
let connection: Connection;
let native: NativeConnection;
let stack: Stack;
let agent: TestAgent;
let namespace = 'default';

beforeAll(async () => {
  quietTemporal();
  // A Temporal server that suggests continue-as-new after 40 history events, so a polling
  // registration reaches the suggestion within seconds: on a real cluster, the namespace that
  // `npm run test:cluster` configures so (TEST_TEMPORAL_CAN_NAMESPACE); otherwise a dev server of
  // its own, since the setting is server-wide there.
  let address: string;
  const canNamespace = process.env.TEST_TEMPORAL_CAN_NAMESPACE;
  if (canNamespace && process.env.TEST_TEMPORAL_ADDRESS) {
    address = process.env.TEST_TEMPORAL_ADDRESS;
    namespace = canNamespace;
  } else {
    server = await startDevServer({
      port: await freePort(),
      dynamicConfig: ['limit.historyCount.suggestContinueAsNew=40'],
    });
    address = server.address;
  }
  connection = await Connection.connect({ address });
  native = await NativeConnection.connect({ address });
  agent = await startTestAgent();
  stack = await startStack(
    { client: new Client({ connection, namespace }), nativeConnection: native, namespace },
    `can-${crypto.randomBytes(3).toString('hex')}`,
    { env: { POLL_INITIAL: '200ms', POLL_MAX: '200ms' } },
  );
});
afterAll(async () => {
  await stack?.close();
  await agent?.close();
  await native?.close();
  await connection?.close();
  await server?.stop();
});

it('a long-polling registration continues as new when Temporal suggests it, and still resolves once', async () => {
  agent.setState('rt-can', 'TASK_STATE_WORKING');
  const res = await stack.api('/v1/registrations', {
    method: 'POST',
    json: { mode: 'separate', remoteTaskId: 'rt-can', agent: { url: agent.url } },
  });
  const reg = (await res.json()) as { id: string };
  const client = new Client({ connection, namespace });
  const handle = client.workflow.getHandle(makeRegistrationWorkflowId(reg.id));
  // Wait until the first run has handed over to a new run.
  // The API starts the workflow after its answer: wait until it exists.
  const first = await eventually(
    () => handle.describe().catch(() => undefined),
    (d) => d !== undefined,
  );
  const firstRun = first!.runId;
  await eventually(
    () => handle.describe().then((d) => d.runId),
    (runId) => runId !== firstRun,
    60_000,
  );
  agent.setState('rt-can', 'TASK_STATE_COMPLETED');
  const r = await handle.result();
  expect(r).toMatchObject({ status: 'resolved', remoteState: 'TASK_STATE_COMPLETED' });
  const feed = await json(stack.api('/v1/resolutions?after=0'));
  expect(feed.items.filter((i: { registrationId: string }) => i.registrationId === reg.id)).toHaveLength(1);
});
