/**
 * Run as a child process by test/integration/tracing-lazy.test.ts: starts the worker, the api and the
 * inbox as src/main.ts does (settings, startTracing, runtime), then prints one JSON line: whether
 * tracing is on, every loaded module whose path names OpenTelemetry with the modules that required
 * it, and the workflow interceptor modules a worker would bundle. Then stops everything.
 */
import path from 'node:path';
import { loadSettings } from '../../src/config';
import { closeRuntime, createRuntime } from '../../src/runtime';
import { startApi, startInbox, startWorker, type Service } from '../../src/services';
import { startTracing, shutdownTracing } from '../../src/tracing';
import { workflowTracing } from '../../src/worker/worker';

async function main() {
  const settings = loadSettings();
  const tracing = startTracing('a2a-push-probe');
  const rt = createRuntime(settings, 'probe');
  const services: Service[] = [];
  services.push(await startWorker(rt, { workflowBundle: { codePath: process.env.PROBE_WORKFLOW_BUNDLE! } }));
  services.push(await startApi(rt));
  services.push(await startInbox(rt));
  const otel = (p: string) => /opentelemetry/.test(p);
  const root = path.resolve(__dirname, '..', '..');
  const rel = (p: string) => path.relative(root, p);
  const loaded = Object.keys(require.cache).filter(otel).map(rel);
  const requiredBy: Record<string, string[]> = {};
  for (const [file, mod] of Object.entries(require.cache))
    for (const child of mod?.children ?? [])
      if (otel(child.filename) && !otel(file)) (requiredBy[rel(child.filename)] ??= []).push(rel(file));
  process.stdout.write(
    JSON.stringify({
      tracing,
      loaded,
      requiredBy,
      workflowModules: workflowTracing().workflowModules.map(rel),
    }) + '\n',
  );
  for (const s of services.reverse()) await s.stop();
  await shutdownTracing();
  await closeRuntime(rt);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
