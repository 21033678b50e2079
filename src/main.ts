import { loadSettings, SettingsError } from './config';
import { bootstrapApiKey } from './db/apikeys';
import { migrate } from './db/pool';
import { createRuntime } from './runtime';
import { startApi, startInbox, startWorker, stopOnSignals, type Service } from './services';
import { startTracing } from './tracing';

/** Per-process start for real deployments: `node dist/src/main.js api|inbox|worker`. */
async function main(kind: string | undefined) {
  if (kind !== 'api' && kind !== 'inbox' && kind !== 'worker') {
    console.error('usage: main.ts api|inbox|worker');
    process.exit(2);
  }
  const settings = loadSettings();
  // Before any Temporal client or worker exists: they take their tracing interceptors at creation.
  startTracing(`a2a-push-${kind}`);
  const rt = createRuntime(settings, kind);
  const services: Service[] = [];
  stopOnSignals(
    () => services,
    () => rt.db.end(),
  );
  if (kind === 'api') {
    await migrate(rt.db);
    if (settings.BOOTSTRAP_API_KEY) {
      const k = await bootstrapApiKey(rt.db, settings.BOOTSTRAP_API_KEY);
      if (k) rt.logger.info({ apiKeyId: k.id, tenant: k.tenantId }, 'bootstrap API key created');
    }
  }
  const svc =
    kind === 'api' ? await startApi(rt) : kind === 'inbox' ? await startInbox(rt) : await startWorker(rt);
  services.push(svc);
  rt.logger.info({ url: svc.url }, `${kind} started`);
}

main(process.argv[2]).catch((err: unknown) => {
  console.error(err instanceof SettingsError ? err.message : err);
  process.exit(1);
});
