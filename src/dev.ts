import { loadSettings, SettingsError } from './config';
import { bootstrapApiKey } from './db/apikeys';
import { migrate } from './db/pool';
import {
  EMBEDDED_DB,
  EMBEDDED_PG_DIR,
  EMBEDDED_PG_PORT,
  EMBEDDED_TEMPORAL_DB,
  EMBEDDED_TEMPORAL_PORT,
  EMBEDDED_TEMPORAL_UI_PORT,
  sealKeysOrKeyFile,
} from './embedded/data';
import { EmbeddedPostgresError, startEmbeddedPostgres, type EmbeddedPg } from './embedded/postgres';
import { startDevServer, type DevServer } from './embedded/temporal';
import { createRuntime } from './runtime';
import { startApi, startInbox, startWorker, stopOnSignals, type Service } from './services';
import { startTracing } from './tracing';

/**
 * `npm start`: everything on one machine with embedded defaults — Postgres and the Temporal dev server
 * (Web UI on :8233) with their data under .data/, then the api, inbox and worker. Ctrl-C stops all.
 */
async function main() {
  const services: Service[] = [];
  let pg: EmbeddedPg | undefined;
  let temporal: DevServer | undefined;
  stopOnSignals(
    () => services,
    async () => {
      await temporal?.stop();
      await pg?.stop();
    },
  );

  const env = { ...process.env };
  // Checked before anything starts.
  const seal = sealKeysOrKeyFile(env);
  env.SEAL_KEYS = seal.keys;
  env.SEAL_ACTIVE_KEY = seal.active;
  if (!env.DATABASE_URL) {
    pg = await startEmbeddedPostgres({
      dir: EMBEDDED_PG_DIR,
      port: EMBEDDED_PG_PORT,
      databases: [EMBEDDED_DB],
    });
    env.DATABASE_URL = pg.url(EMBEDDED_DB);
  }
  if (!env.TEMPORAL_ADDRESS) {
    temporal = await startDevServer({
      port: EMBEDDED_TEMPORAL_PORT,
      uiPort: EMBEDDED_TEMPORAL_UI_PORT,
      dbFile: EMBEDDED_TEMPORAL_DB,
      log: (l) => process.stderr.write(`[temporal] ${l}\n`),
    });
    env.TEMPORAL_ADDRESS = temporal.address;
    // Never leave the dev server behind, whatever way this process ends.
    const child = temporal.process;
    process.once('exit', () => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
  }
  const settings = loadSettings(env);
  // Before any Temporal client or worker exists: they take their tracing interceptors at creation.
  startTracing('a2a-push');
  if (!settings.PUBLIC_BASE_URL) settings.PUBLIC_BASE_URL = `http://127.0.0.1:${settings.INBOX_PORT}`;
  const rt = createRuntime(settings, 'a2a-push');
  await migrate(rt.db);

  const created = await bootstrapApiKey(rt.db, settings.BOOTSTRAP_API_KEY);
  // A key the operator chose is not printed back; a generated one is shown this once.
  const firstKey = created && !settings.BOOTSTRAP_API_KEY ? created.key : undefined;

  const worker = await startWorker(rt);
  services.push(worker);
  // Beside the worker: with EAGER_START=on the api's dispatcher starts deliveries eagerly on its connection.
  const api = await startApi(rt, worker);
  services.unshift(api);
  const inbox = await startInbox(rt);
  services.unshift(inbox);

  const lines = [
    '',
    'a2a-push is running (Ctrl-C stops everything)',
    `  API            ${api.url}/v1   (OpenAPI: ${api.url}/v1/openapi.json)`,
    `  inbox          ${inbox.url}/a2a/push/{registrationId}   (public base URL ${settings.PUBLIC_BASE_URL})`,
    `  worker         http://127.0.0.1:${settings.WORKER_PORT}/healthz`,
    `  Temporal UI    ${temporal?.uiUrl ?? '(external Temporal at ' + settings.TEMPORAL_ADDRESS + ')'}`,
    `  Postgres       ${pg ? `embedded, data in ${EMBEDDED_PG_DIR}` : 'DATABASE_URL'}`,
    firstKey
      ? `  API key        ${firstKey}   (tenant "default"; shown once — keep it)`
      : '  API key        use your key; create another with: npm run apikey -- create --tenant NAME',
    '',
  ];
  process.stdout.write(lines.join('\n') + '\n');
}

main().catch((err: unknown) => {
  // A start that cannot work here says so in one line (and what to do); anything else keeps its stack.
  console.error(err instanceof SettingsError || err instanceof EmbeddedPostgresError ? err.message : err);
  process.exit(1);
});
