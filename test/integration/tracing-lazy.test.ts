/**
 * Without an OTEL_* setting no OpenTelemetry module is loaded: checked in a child process that starts
 * the worker, the api and the inbox as a deployment does (test/helpers/loaded-modules.ts), then lists
 * what it loaded. The same child with OTEL_* settings loads the SDK, so the check can fail.
 */
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import { ROOT } from '../helpers/global-setup';
import { createTestDb, type TestDb } from '../helpers/db';

jest.setTimeout(120_000);

interface Probe {
  tracing: boolean;
  loaded: string[];
  requiredBy: Record<string, string[]>;
  workflowModules: string[];
}

let tdb: TestDb;
beforeAll(async () => {
  tdb = await createTestDb();
});
afterAll(async () => {
  await tdb?.drop();
});

async function probe(extra: Record<string, string>): Promise<Probe> {
  // Only what the service needs: no OTEL_* from the environment of the test run.
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    TS_NODE_TRANSPILE_ONLY: 'true',
    DATABASE_URL: tdb.url,
    TEMPORAL_ADDRESS: process.env.TEST_TEMPORAL_ADDRESS!,
    TEMPORAL_NAMESPACE: process.env.TEST_TEMPORAL_NAMESPACE ?? 'default',
    TASK_QUEUE: `lazy-${crypto.randomBytes(4).toString('hex')}`,
    SEAL_KEYS: `k1:${crypto.randomBytes(32).toString('base64')}`,
    SEAL_ACTIVE_KEY: 'k1',
    PUBLIC_BASE_URL: 'http://127.0.0.1:1',
    API_PORT: '0',
    INBOX_PORT: '0',
    WORKER_PORT: '0',
    LOG_LEVEL: 'warn',
    PROBE_WORKFLOW_BUNDLE: process.env.TEST_WORKFLOW_BUNDLE!,
    ...extra,
  };
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['-r', 'ts-node/register/transpile-only', path.join('test', 'helpers', 'loaded-modules.ts')],
    { cwd: ROOT, env, maxBuffer: 16 * 1024 * 1024 },
  );
  const line = stdout.split('\n').find((l) => l.startsWith('{"tracing"'));
  if (!line) throw new Error(`no probe line in:\n${stdout}`);
  return JSON.parse(line) as Probe;
}

it('with no OTEL_* setting, starting every service loads no OpenTelemetry SDK nor interceptor', async () => {
  const p = await probe({});
  expect(p.tracing).toBe(false);
  // prom-client 15 requires @opentelemetry/api itself (for exemplars) when it loads: the API alone,
  // a no-op without an SDK. Nothing else of OpenTelemetry, and nothing of ours requires it.
  const notApi = p.loaded.filter((f) => !f.startsWith('node_modules/@opentelemetry/api/'));
  expect(notApi).toEqual([]);
  for (const [file, by] of Object.entries(p.requiredBy)) {
    expect(file).toMatch(/^node_modules\/@opentelemetry\/api\//);
    for (const b of by) expect(b).toMatch(/^node_modules\/prom-client\//);
  }
  expect(p.workflowModules.filter((m) => /opentelemetry/.test(m))).toEqual([]);
});

it("with OTEL_* settings, the same start loads the SDK and bundles Temporal's workflow interceptors", async () => {
  const p = await probe({
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1',
    OTEL_SERVICE_NAME: 'probe',
  });
  expect(p.tracing).toBe(true);
  expect(p.loaded.some((f) => f.startsWith('node_modules/@opentelemetry/sdk-node/'))).toBe(true);
  expect(p.loaded.some((f) => f.startsWith('node_modules/@temporalio/interceptors-opentelemetry/'))).toBe(
    true,
  );
  expect(p.workflowModules.some((m) => /interceptors-opentelemetry/.test(m))).toBe(true);
});
