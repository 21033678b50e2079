/**
 * Runs schemathesis against the whole service (api, inbox, worker on embedded Postgres and the Temporal
 * dev server, all in a scratch folder) through the OpenAPI document at /v1/openapi.json. Started by
 * scripts/schemathesis.sh inside a network namespace with loopback only; it refuses to run outside one.
 *
 * Options: --seed N (22), --max-examples N (25), --phases LIST (all four), --workers N (1: with more, hypothesis on Python 3.11
 * failed here with "SystemError: AST constructor recursion depth mismatch" while describing a filter). Reports land in test-output/schemathesis/.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadSettings } from '../src/config';
import { createApiKey } from '../src/db/apikeys';
import { migrate } from '../src/db/pool';
import { startEmbeddedPostgres, type EmbeddedPg } from '../src/embedded/postgres';
import { startDevServer, type DevServer } from '../src/embedded/temporal';
import { createRuntime } from '../src/runtime';
import { Keyring } from '../src/sealing/keyring';
import { startApi, startInbox, startWorker, type Service } from '../src/services';
const { schemathesisBin } = require('./install-python-sdk.js') as { schemathesisBin: string };

const root = path.resolve(__dirname, '..');
const CHECKS = [
  'not_a_server_error',
  'status_code_conformance',
  'content_type_conformance',
  'response_schema_conformance',
  'response_headers_conformance',
];
/** Above the feed's 30 s long-poll. */
const REQUEST_TIMEOUT_S = 45;

const PHASES = 'examples,coverage,fuzzing,stateful';

function textOption(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : def;
}

function option(name: string, def: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? Number(process.argv[i + 1]) : def;
  if (!Number.isInteger(v) || v < 0) throw new Error(`--${name} must be an integer`);
  return v;
}

/** True when no interface but loopback has an address: the only network this process can reach. */
function loopbackOnly(): boolean {
  return Object.entries(os.networkInterfaces()).every(([, addrs]) => (addrs ?? []).every((a) => a.internal));
}

async function main(): Promise<number> {
  const seed = option('seed', 22);
  const maxExamples = option('max-examples', 25);
  const workers = option('workers', 1);
  const phases = textOption('phases', PHASES);
  if (!loopbackOnly())
    throw new Error(
      'run this through scripts/schemathesis.sh: it needs a network namespace with loopback only',
    );

  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-schemathesis-'));
  fs.chmodSync(scratch, 0o755); // embedded Postgres runs as its own user when we are root
  const reports = path.join(root, 'test-output', 'schemathesis');
  fs.rmSync(reports, { recursive: true, force: true });
  fs.mkdirSync(reports, { recursive: true });
  const serviceLog = fs.createWriteStream(path.join(reports, 'service.log'));
  const log = (l: string) => serviceLog.write(`${l}\n`);

  let pg: EmbeddedPg | undefined;
  let temporal: DevServer | undefined;
  const services: Service[] = [];
  try {
    pg = await startEmbeddedPostgres({
      dir: path.join(scratch, 'pg'),
      port: 54329,
      databases: ['a2a_push'],
      fsync: false,
      log,
    });
    temporal = await startDevServer({ port: 7233, log: (l) => log(`[temporal] ${l}`) });
    const settings = loadSettings({
      ...process.env,
      DATABASE_URL: pg.url('a2a_push'),
      TEMPORAL_ADDRESS: temporal.address,
      SEAL_KEYS: Keyring.generateEntry('k1'),
      SEAL_ACTIVE_KEY: 'k1',
      PUBLIC_BASE_URL: 'http://127.0.0.1:3001',
      API_PORT: '3000',
      INBOX_PORT: '3001',
      WORKER_PORT: '3002',
      LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    });
    const rt = createRuntime(settings, 'a2a-push');
    await migrate(rt.db);
    const key = await createApiKey(rt.db, 'schemathesis');
    services.push(await startWorker(rt));
    const api = await startApi(rt);
    services.unshift(api);
    services.unshift(await startInbox(rt));

    const args = [
      'run',
      `${api.url}/v1/openapi.json`,
      '--seed',
      String(seed),
      '--phases',
      phases,
      '--checks',
      CHECKS.join(','),
      '--max-examples',
      String(maxExamples),
      '--workers',
      String(workers),
      '--request-timeout',
      String(REQUEST_TIMEOUT_S),
      '--header',
      `Authorization: Bearer ${key.key}`,
      '--generation-database',
      'none',
      '--no-color',
      '--report',
      'junit,har',
      '--report-dir',
      reports,
    ];
    console.log(
      `schemathesis: seed ${seed}, phases ${phases}, max examples ${maxExamples}, ${workers} workers, checks ${CHECKS.join(', ')}`,
    );
    const config = path.join(root, 'test', 'schemathesis', 'schemathesis.toml');
    const child = spawn(schemathesisBin, ['--config-file', config, ...args], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    // Passed through line by line; the "Test cases:" summary is read for the closing line below.
    // Schemathesis frames its sections pytest-style ("==== SUMMARY ====", and last
    // "==== 2 warnings in 91s ===="). CI takes such a line for pytest's closing line, and one that
    // names no test for a run that executed none, so the frames are printed as "-- … --" instead.
    let tail = '';
    let partial = '';
    const unframe = (line: string): string => {
      const framed = /^=+ (.*) =+$/.exec(line);
      return framed ? `-- ${framed[1]} --` : line;
    };
    child.stdout.on('data', (chunk: Buffer) => {
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) process.stdout.write(`${unframe(line)}\n`);
      tail = (tail + chunk.toString('utf8')).slice(-4096);
    });
    const code = await new Promise<number>((resolve) =>
      child.once('close', (c, s) => resolve(c ?? (s ? 1 : 0))),
    );
    if (partial) process.stdout.write(`${unframe(partial)}\n`);
    console.log(
      `schemathesis: exit code ${code}; reports and the service log in ${path.relative(root, reports)}/`,
    );
    // The step ends on the plain count of its generated cases.
    const cases = /(\d+) generated, (.*)/.exec(tail);
    const passed = Number(/(\d+) passed/.exec(cases?.[2] ?? '')?.[1] ?? 0);
    const failed = Number(/(\d+) failed/.exec(cases?.[2] ?? '')?.[1] ?? 0) + (code !== 0 && !cases ? 1 : 0);
    console.log(`schemathesis: ${passed} passed, ${failed} failed`);
    return code;
  } finally {
    for (const s of services) await s.stop().catch(() => undefined);
    await temporal?.stop().catch(() => undefined);
    await pg?.stop().catch(() => undefined);
    serviceLog.end();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
