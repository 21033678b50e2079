/**
 * /readyz of the api, the inbox and the worker, as the production starters build them, over a
 * Postgres and a Temporal server that the test takes away (a TCP plug in front of each) and brings
 * back.
 */
import crypto from 'node:crypto';
import pino from 'pino';
import { loadSettings } from '../../src/config';
import { PgListener } from '../../src/db/listen';
import { createPool } from '../../src/db/pool';
import { compilePolicy } from '../../src/outbound';
import type { Runtime } from '../../src/runtime';
import { Keyring } from '../../src/sealing/keyring';
import { startApi, startInbox, startWorker, type Service } from '../../src/services';
import { createTestDb, type TestDb } from '../helpers/db';
import { eventually, type Json } from '../helpers/harness';
import { startPlug, type Plug } from '../helpers/plug';
import { freePort } from '../helpers/test-services-port';

jest.setTimeout(120_000);

let tdb: TestDb;
let pg: Plug;
let temporal: Plug;
let rt: Runtime;
const services: Array<Service & { port: number }> = [];

beforeAll(async () => {
  tdb = await createTestDb();
  const dbUrl = new URL(tdb.url);
  pg = await startPlug(dbUrl.hostname, Number(dbUrl.port));
  const [tHost, tPort] = process.env.TEST_TEMPORAL_ADDRESS!.split(':') as [string, string];
  temporal = await startPlug(tHost, Number(tPort));
  const plugged = new URL(tdb.url);
  plugged.port = String(pg.port);
  const [apiPort, inboxPort, workerPort] = [await freePort(), await freePort(), await freePort()];
  const settings = loadSettings({
    LOG_LEVEL: 'silent',
    DATABASE_URL: plugged.toString(),
    TEMPORAL_ADDRESS: `127.0.0.1:${temporal.port}`,
    TEMPORAL_NAMESPACE: process.env.TEST_TEMPORAL_NAMESPACE ?? 'default',
    TASK_QUEUE: `readiness-${crypto.randomBytes(4).toString('hex')}`,
    PUBLIC_BASE_URL: `http://127.0.0.1:${inboxPort}`,
    API_PORT: String(apiPort),
    INBOX_PORT: String(inboxPort),
    WORKER_PORT: String(workerPort),
  });
  rt = {
    settings,
    logger: pino({ level: 'silent' }),
    listener: new PgListener(plugged.toString(), pino({ level: 'silent' })),
    db: createPool(plugged.toString(), 4),
    keyring: Keyring.parse(Keyring.generateEntry('test')),
    policy: compilePolicy('', ''),
  };
  services.push(await startApi(rt), await startInbox(rt));
  const worker = await startWorker(rt, { workflowBundle: { codePath: process.env.TEST_WORKFLOW_BUNDLE! } });
  services.push({ ...worker, port: workerPort });
});

afterAll(async () => {
  pg?.restore();
  temporal?.restore();
  for (const s of services) await s.stop().catch(() => undefined);
  await rt?.listener.stop();
  await rt?.db.end();
  await pg?.close();
  await temporal?.close();
  await tdb?.drop();
});

const readyz = async (port: number): Promise<{ status: number; body: Json }> => {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: res.status, body: await res.json() };
};
const all = () => Promise.all(services.map((s) => readyz(s.port).then((r) => ({ name: s.name, ...r }))));
const expectAll = (
  answers: Array<{ name: string; status: number; body: Json }>,
  status: number,
  checks: Json,
) =>
  expect(answers).toEqual(
    ['api', 'inbox', 'worker'].map((name) => ({
      name,
      status,
      body: { status: status === 200 ? 'ready' : 'unavailable', checks },
    })),
  );

describe('/readyz on the api, the inbox and the worker', () => {
  it('answers 200 while Postgres and Temporal are reachable', async () => {
    expectAll(await all(), 200, { postgres: true, temporal: true });
  });

  it('answers 503 naming postgres while Postgres is away, and 200 again once it is back', async () => {
    pg.cut();
    expectAll(await all(), 503, { postgres: false, temporal: true });
    pg.restore();
    expectAll(await eventually(all, (a) => a.every((r) => r.status === 200)), 200, {
      postgres: true,
      temporal: true,
    });
  });

  it('answers 503 naming temporal while Temporal is away, and 200 again once it is back', async () => {
    temporal.cut();
    expectAll(await all(), 503, { postgres: true, temporal: false });
    temporal.restore();
    expectAll(await eventually(all, (a) => a.every((r) => r.status === 200), 60_000), 200, {
      postgres: true,
      temporal: true,
    });
  });
});
