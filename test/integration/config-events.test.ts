/**
 * The config events feed (GET /v1/configEvents, contract §11) end to end on the dev server: each change
 * of a config's state written once, in the same transaction as the change; paged and long-polled as
 * /v1/resolutions; one tenant never sees another's. (The health rule's `failing`, `recovered` and
 * `stopped` at exact workflow times: test/workflows/config-health.test.ts.)
 */
import crypto from 'node:crypto';
import { createApiKey } from '../../src/db/apikeys';
import { configEvents } from '../../src/metrics';
import {
  connectDevServer,
  createConfig,
  eventually,
  json,
  jobRow,
  markTargetAnswered,
  startStack,
  writeEvent,
  type Json,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

jest.setTimeout(60_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
let receiver: Receiver;
const queue = `config-events-${crypto.randomBytes(4).toString('hex')}`;
const status = (taskId: string) => ({ statusUpdate: { taskId, status: { state: 'TASK_STATE_WORKING' } } });

beforeAll(async () => {
  temporal = await connectDevServer();
  // Answers by path: /401, /410, anything else 200.
  receiver = await startReceiver({
    script: (req) => ({ status: req.path.endsWith('/401') ? 401 : req.path.endsWith('/410') ? 410 : 200 }),
  });
  // A long-poll re-reads only every minute here: what answers it sooner is the feed's NOTIFY.
  stack = await startStack(temporal, queue, { env: {}, feedRecheckMs: 60_000 });
  await markTargetAnswered(stack.tdb.db, receiver.url);
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
  await temporal?.close();
});

const base = () => receiver.url.replace(/\/hook$/, '');
const feed = (query = 'after=0') => json(stack.api(`/v1/configEvents?${query}`));
const eventsOf = async (taskId: string) =>
  ((await feed('after=0&limit=1000')).items as Json[]).filter((e) => e.taskId === taskId);
const countOf = async (kind: string) =>
  (await configEvents.get()).values.filter((v) => v.labels.kind === kind).reduce((a, v) => a + v.value, 0);

it('a 401 pauses the config and a 410 stops another: one `auth_failed` and one `stopped` event each, with the reason, once', async () => {
  const t401 = `ce-401-${crypto.randomUUID()}`;
  const t410 = `ce-410-${crypto.randomUUID()}`;
  await createConfig(stack, t401, { id: 'c', url: `${base()}/401` });
  await createConfig(stack, t410, { id: 'c', url: `${base()}/410` });
  const paused = await countOf('auth_failed');
  // Two events each, back to back: the second job is written before the first one's answer paused the
  // config, so it ends with the config's status too; the config changes once.
  const jobs: string[] = [];
  for (const t of [t401, t410])
    for (let i = 0; i < 2; i++)
      jobs.push(...(await writeEvent(stack, t, status(t))).deliveries.map((d) => d.id));
  for (const id of jobs)
    await eventually(
      () => jobRow(stack, id),
      (j) => ['auth_failed', 'stopped'].includes(j.status),
    );
  const a = await eventsOf(t401);
  expect(a).toEqual([
    {
      cursor: expect.any(String),
      taskId: t401,
      configId: 'c',
      kind: 'auth_failed',
      reason: 'http_401',
      at: expect.any(String),
    },
  ]);
  expect((await eventsOf(t410)).map((e) => [e.kind, e.reason])).toEqual([['stopped', 'http_410']]);
  // A config paused before it gets no job, and writes nothing more.
  expect((await writeEvent(stack, t401, status(t401))).deliveries).toEqual([]);
  expect(await eventsOf(t401)).toHaveLength(1);
  expect(await countOf('auth_failed')).toBe(paused + 1);
});

it('a long-poll waiting on the feed is answered by the next event at once; deleting a config writes `deleted`', async () => {
  const taskId = `ce-del-${crypto.randomUUID()}`;
  await createConfig(stack, taskId, { id: 'c', url: receiver.url });
  const head = await feed('after=0&limit=1000');
  // Waiting, with nothing after the head, up to 20 s (and no re-read for a minute).
  const waiting = feed(`after=${head.nextCursor}&wait=20`);
  await new Promise((r) => setTimeout(r, 300));
  expect(
    (await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs/c`, { method: 'DELETE' })).status,
  ).toBe(204);
  const page = await waiting;
  expect(page.items).toEqual([
    { cursor: expect.any(String), taskId, configId: 'c', kind: 'deleted', at: expect.any(String) },
  ]);
  expect(page.nextCursor).toBe(page.items[0].cursor);
  // Deleting it again (absent) writes nothing.
  expect(
    (await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs/c`, { method: 'DELETE' })).status,
  ).toBe(204);
  expect(await eventsOf(taskId)).toHaveLength(1);
});

it('pages by cursor in commit order, an empty page keeping the cursor; another tenant sees none of it', async () => {
  const taskId = `ce-page-${crypto.randomUUID()}`;
  for (const id of ['a', 'b', 'c']) await createConfig(stack, taskId, { id, url: receiver.url });
  const from = (await feed('after=0&limit=1000')).nextCursor as string;
  for (const id of ['a', 'b', 'c'])
    expect(
      (await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs/${id}`, { method: 'DELETE' })).status,
    ).toBe(204);
  const seen: string[] = [];
  let after = from;
  for (let k = 0; k < 3; k++) {
    const page = await feed(`after=${after}&limit=1`);
    expect(page.items).toHaveLength(1);
    seen.push(page.items[0].configId);
    expect(BigInt(page.nextCursor)).toBeGreaterThan(BigInt(after));
    after = page.nextCursor;
  }
  expect(seen).toEqual(['a', 'b', 'c']);
  const empty = await feed(`after=${after}&limit=1`);
  expect(empty).toEqual({ items: [], nextCursor: after });
  // Out of range: 400, as the resolutions feed.
  expect((await stack.api('/v1/configEvents?limit=1001')).status).toBe(400);
  expect((await stack.api('/v1/configEvents?wait=31')).status).toBe(400);

  const other = await createApiKey(stack.tdb.db, 'tenant-other');
  const theirs = await fetch(`${stack.apiUrl}/v1/configEvents?after=0&limit=1000`, {
    headers: { authorization: `Bearer ${other.key}` },
  });
  expect(theirs.status).toBe(200);
  expect(await theirs.json()).toEqual({ items: [], nextCursor: '0' });
});
