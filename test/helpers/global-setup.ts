import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { bundleWorkflowCode } from '@temporalio/worker';
import { registerNamespace } from '../../scripts/cluster/cluster';

export const ROOT = path.resolve(__dirname, '..', '..');
export const BUNDLE_PATH = path.join(ROOT, '.test-tmp', 'workflow-bundle.js');

/**
 * The production workflow code and interceptors, bundled once into `file` for workers and replay;
 * `extraInterceptors` adds modules (Temporal's OpenTelemetry ones, for the tracing test).
 */
export async function writeWorkflowBundle(file: string, extraInterceptors: string[] = []): Promise<void> {
  const { code } = await bundleWorkflowCode({
    workflowsPath: path.join(ROOT, 'src', 'workflows', 'index.ts'),
    workflowInterceptorModules: [
      path.join(ROOT, 'src', 'workflows', 'interceptors.ts'),
      ...extraInterceptors,
    ],
    logger: {
      trace() {},
      debug() {},
      info() {},
      warn() {},
      error: (m: string) => console.error(m),
      log() {},
    } as never,
  });
  fs.writeFileSync(file, code);
}

declare global {
  var __A2A_TEST_SERVICES__: ChildProcess | undefined;
}

/**
 * One Postgres and one Temporal dev server for the whole run; each test file makes its own database.
 * With TEMPORAL_ADDRESS set (e.g. by `npm run test:cluster`), the tests use that Temporal server and
 * its TEMPORAL_NAMESPACE instead of a dev server: the namespace and the search attributes are
 * registered there first, as a deployment's start command does.
 */
export default async function globalSetup(): Promise<void> {
  // The interop tests' Python SDK environment: made by postinstall, and here when it is missing (quick when present).
  execFileSync(process.execPath, [path.join(ROOT, 'scripts', 'install-python-sdk.js')], { stdio: 'inherit' });
  const external = process.env.TEMPORAL_ADDRESS || undefined;
  const namespace = process.env.TEMPORAL_NAMESPACE || 'default';
  if (external) await registerNamespace(external, namespace, { timeoutMs: 60_000, log: () => undefined });
  const child = spawn(
    process.execPath,
    [
      '-r',
      'ts-node/register/transpile-only',
      path.join(__dirname, 'test-services.ts'),
      ...(external ? [] : ['--temporal']),
    ],
    {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'inherit'],
      env: { ...process.env, TS_NODE_TRANSPILE_ONLY: 'true' },
    },
  );
  globalThis.__A2A_TEST_SERVICES__ = child;
  const line = await new Promise<string>((resolve, reject) => {
    const rl = readline.createInterface({ input: child.stdout! });
    rl.once('line', resolve);
    child.once('exit', (code) => reject(new Error(`test services exited with ${code}`)));
  });
  const info = JSON.parse(line) as { pgAdminUrl: string; temporalAddress: string };
  process.env.TEST_PG_ADMIN_URL = info.pgAdminUrl;
  process.env.TEST_TEMPORAL_ADDRESS = external ?? info.temporalAddress;
  process.env.TEST_TEMPORAL_NAMESPACE = external ? namespace : 'default';

  // The workflow bundle is built once for every test file that runs a worker.
  fs.mkdirSync(path.dirname(BUNDLE_PATH), { recursive: true });
  await writeWorkflowBundle(BUNDLE_PATH);
  process.env.TEST_WORKFLOW_BUNDLE = BUNDLE_PATH;
}
