import { loadSettings, SettingsError } from './config';
import { bootstrapApiKey } from './db/apikeys';
import { migrate } from './db/pool';
import { closeRuntime, createRuntime } from './runtime';
import { startApi, startInbox, startWorker, stopOnSignals, type Service } from './services';
import { startTracing } from './tracing';

const ROLES = ['api', 'inbox', 'worker'] as const;
type Role = (typeof ROLES)[number];

/**
 * Per-process start for real deployments: `node dist/src/main.js api|inbox|worker`, or several roles
 * in one process, comma-separated (`api,worker`, `api,inbox,worker`). An api beside a worker starts
 * delivery workflows eagerly on the worker's connection (EAGER_START).
 */
async function main(arg: string | undefined) {
  const roles = [...new Set((arg ?? '').split(','))];
  if (roles.length === 0 || !roles.every((r): r is Role => (ROLES as readonly string[]).includes(r))) {
    console.error('usage: main.ts ROLE[,ROLE…]   (roles: api, inbox, worker)');
    process.exit(2);
  }
  const settings = loadSettings();
  const name = roles.join('+');
  // Before any Temporal client or worker exists: they take their tracing interceptors at creation.
  startTracing(`a2a-push-${name}`);
  const rt = createRuntime(settings, name);
  const services: Service[] = [];
  stopOnSignals(
    () => services,
    () => closeRuntime(rt),
  );
  if (roles.includes('api')) {
    await migrate(rt.db);
    if (settings.BOOTSTRAP_API_KEY) {
      const k = await bootstrapApiKey(rt.db, settings.BOOTSTRAP_API_KEY);
      if (k) rt.logger.info({ apiKeyId: k.id, tenant: k.tenantId }, 'bootstrap API key created');
    }
  }
  // The worker first (the api's eager starts need it); stopped last (services stop front to back).
  const worker = roles.includes('worker') ? await startWorker(rt) : undefined;
  if (worker) services.push(worker);
  if (roles.includes('api')) services.unshift(await startApi(rt, worker));
  if (roles.includes('inbox')) services.unshift(await startInbox(rt));
  for (const svc of services) rt.logger.info({ url: svc.url }, `${svc.name} started`);
}

main(process.argv[2]).catch((err: unknown) => {
  console.error(err instanceof SettingsError ? err.message : err);
  process.exit(1);
});
