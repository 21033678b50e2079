/**
 * `npm run test:clients` (scripts/ci-clients.sh, which installs the tools first): the clients nr-llm would
 * generate from the OpenAPI document work. Starts the whole service (api, inbox, worker on embedded
 * Postgres and the Temporal dev server, on free ports, with a local HTTPS push receiver and a local A2A
 * agent), then, on the document it serves at /v1/openapi.json:
 *   1. `openapi-generator-cli validate --recommend`: no issue;
 *   2. `openapi-spec-validator`: OK;
 *   3. `openapi-generator-cli generate -g php`, validation on: no warning about the document, and every
 *      model class named after a schema of components.schemas;
 *   4. the PHP walk-through (test/clients/walkthrough.php) through that client: every step passes.
 * The agent holds the registration's GetTask for 2 s, so the walk-through's long-poll is waiting when the
 * resolution arrives. Output lands in test-output/clients/ (the document, the generator's log, the
 * client). The closing line, `clients: N passed, N failed`, counts the checks and the walk-through's
 * steps (scripts/ci-count.js).
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
import { startTestAgent, type TestAgent } from '../test/helpers/agent';
import { startReceiver, type Receiver } from '../test/helpers/receiver';
import { makeTestTls } from '../test/helpers/tls';
import { freePort } from './cluster/cluster';
const { openapiGeneratorBin, openapiSpecValidatorBin } = require('./install-python-sdk.js') as {
  openapiGeneratorBin: string;
  openapiSpecValidatorBin: string;
};

const root = path.resolve(__dirname, '..');
const out = path.join(root, 'test-output', 'clients');
/** The generated client's namespace, as nr-llm might name it. */
const PHP_PACKAGE = 'A2aPush\\Client';
/**
 * The generator's one warning that is not about the document: it says the same of every 3.1 document.
 * Any other WARN or ERROR line fails the step.
 */
const GENERIC_WARNINGS = [/OpenAPI 3\.1 support is still in beta/];
const AGENT_TOKEN = 'nr-llm-token-for-agent';

let passed = 0;
let failed = 0;
const check = (what: string, ok: boolean, detail = '') => {
  if (ok) passed++;
  else failed++;
  console.log(`clients: ${ok ? 'ok' : 'FAILED'} - ${what}${detail ? `\n${detail}` : ''}`);
  return ok;
};

/** Runs a command to its end (the service keeps answering meanwhile), echoing its output with a prefix. */
function run(
  cmd: string,
  args: string[],
  o: { env?: NodeJS.ProcessEnv; prefix: string; log?: string },
): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: { ...process.env, ...o.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const take = (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      output += text;
      if (!o.log)
        for (const line of text.split('\n')) if (line) process.stdout.write(`${o.prefix} ${line}\n`);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      if (o.log) fs.writeFileSync(o.log, output);
      resolve({ code: code ?? (signal ? 1 : 0), output });
    });
  });
}

/** The dev server on a free port, started again on another one if the port was taken meanwhile. */
async function startTemporal(log: (l: string) => void): Promise<DevServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startDevServer({ port: await freePort(), log });
    } catch (err) {
      if (attempt >= 3 || !(err as Error).message.includes('exited with')) throw err;
    }
  }
}

async function main(): Promise<number> {
  const started = Date.now();
  fs.rmSync(out, { recursive: true, force: true });
  fs.mkdirSync(out, { recursive: true });
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-clients-'));
  fs.chmodSync(scratch, 0o755); // embedded Postgres runs as its own user when we are root
  const serviceLog = fs.createWriteStream(path.join(out, 'service.log'));
  const log = (l: string) => serviceLog.write(`${l}\n`);

  let pg: EmbeddedPg | undefined;
  let temporal: DevServer | undefined;
  let receiver: Receiver | undefined;
  let agent: TestAgent | undefined;
  const services: Service[] = [];
  try {
    pg = await startEmbeddedPostgres({
      dir: path.join(scratch, 'pg'),
      port: await freePort(),
      databases: ['a2a_push'],
      fsync: false,
      log,
    });
    temporal = await startTemporal((l) => log(`[temporal] ${l}`));
    // The peers: an HTTPS receiver that answers 200, an A2A agent whose task rt-1 has completed.
    const tls = makeTestTls();
    receiver = await startReceiver({ tls, path: '/hook' });
    agent = await startTestAgent({ tls, requireBearer: AGENT_TOKEN });
    agent.setState('rt-1', 'TASK_STATE_COMPLETED');

    const inboxPort = await freePort();
    const settings = loadSettings({
      ...process.env,
      DATABASE_URL: pg.url('a2a_push'),
      TEMPORAL_ADDRESS: temporal.address,
      SEAL_KEYS: Keyring.generateEntry('k1'),
      SEAL_ACTIVE_KEY: 'k1',
      PUBLIC_BASE_URL: `http://127.0.0.1:${inboxPort}`,
      API_PORT: String(await freePort()),
      INBOX_PORT: String(inboxPort),
      WORKER_PORT: String(await freePort()),
      // The peers are on 127.0.0.1, which the address guard refuses by default.
      OUTBOUND_ALLOW_CIDRS: '127.0.0.1/32',
      OUTBOUND_CA_FILE: tls.caFile,
      LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    });
    const rt = createRuntime(settings, 'a2a-push');
    await migrate(rt.db);
    const key = await createApiKey(rt.db, 'nr-llm');
    services.push(await startWorker(rt));
    const api = await startApi(rt);
    services.unshift(api);
    services.unshift(await startInbox(rt));
    console.log(
      `clients: the service is up in ${((Date.now() - started) / 1000).toFixed(1)} s at ${api.url}`,
    );

    // The document as a client fetches it.
    const docUrl = `${api.url}/v1/openapi.json`;
    const docText = await (await fetch(docUrl)).text();
    const docFile = path.join(out, 'openapi.json');
    fs.writeFileSync(docFile, docText);
    const schemas = new Set(Object.keys((JSON.parse(docText) as DocShape).components.schemas));

    const validate = await run(openapiGeneratorBin, ['validate', '--recommend', '-i', docFile], {
      prefix: '[openapi-generator validate]',
    });
    check(
      'openapi-generator-cli validate --recommend: no issue',
      validate.code === 0 && /No validation issues detected/.test(validate.output),
    );
    const specValidator = await run(openapiSpecValidatorBin, [docFile], {
      prefix: '[openapi-spec-validator]',
    });
    check(
      'openapi-spec-validator: OK',
      specValidator.code === 0 && specValidator.output.trim() === `${docFile}: OK`,
    );

    const phpDir = path.join(out, 'php');
    const generate = await run(
      openapiGeneratorBin,
      [
        'generate',
        '-g',
        'php',
        '-i',
        docUrl,
        '-o',
        phpDir,
        '--additional-properties',
        `invokerPackage=${PHP_PACKAGE},packageName=a2a-push-client`,
      ],
      { prefix: '[openapi-generator generate]', log: path.join(out, 'generate.log') },
    );
    const warnings = generate.output
      .split('\n')
      .filter((l) => /\b(WARN|ERROR)\b/.test(l) && !GENERIC_WARNINGS.some((g) => g.test(l)));
    check(
      `openapi-generator-cli generate -g php: exit ${generate.code}, ${warnings.length} warnings about the document (log: ${path.relative(root, out)}/generate.log)`,
      generate.code === 0 && warnings.length === 0,
      warnings.join('\n'),
    );
    const models = fs.existsSync(path.join(phpDir, 'lib', 'Model'))
      ? fs
          .readdirSync(path.join(phpDir, 'lib', 'Model'))
          .map((f) => f.replace(/\.php$/, ''))
          .filter((m) => m !== 'ModelInterface')
          .sort()
      : [];
    const unnamed = models.filter((m) => !schemas.has(m));
    check(
      `the PHP client's ${models.length} model classes carry component names: ${models.join(', ')}`,
      models.length > 0 && unnamed.length === 0,
      unnamed.length ? `not a component: ${unnamed.join(', ')}` : '',
    );

    // The long-poll of step 17 must be waiting when the resolution arrives: the agent holds the
    // registration's GetTask (it follows the remote task id) for 2 s before it answers.
    const getTask = agent.holdNextGetTask();
    void getTask.reached.then(() => setTimeout(() => getTask.release(), 2_000));
    const walk = await run('php', [path.join(root, 'test', 'clients', 'walkthrough.php')], {
      prefix: '[php]',
      env: {
        A2A_PUSH_URL: api.url,
        A2A_PUSH_API_KEY: key.key,
        A2A_PUSH_CLIENT_LIB: path.join(phpDir, 'lib'),
        RECEIVER_URL: receiver.url,
        AGENT_URL: agent.url,
        AGENT_TOKEN,
      },
    });
    const steps = /walkthrough: (\d+) passed, (\d+) failed/.exec(walk.output);
    passed += Number(steps?.[1] ?? 0);
    failed += Number(steps?.[2] ?? 0);
    check(`the PHP walk-through: exit ${walk.code}`, walk.code === 0 && steps !== null && steps[2] === '0');
    const polled = /readResolutions \(wait (\d+)\): the terminal Resolution, in ([\d.]+) s/.exec(walk.output);
    check(
      `the long-poll was waiting when the resolution arrived, and answered then: ${polled?.[2]} s of its ${polled?.[1]} s`,
      polled !== null && Number(polled[2]) >= 1.5 && Number(polled[2]) < Number(polled[1]),
    );
  } finally {
    for (const s of services) await s.stop().catch(() => undefined);
    await agent?.close().catch(() => undefined);
    await receiver?.close().catch(() => undefined);
    await temporal?.stop().catch(() => undefined);
    await pg?.stop().catch(() => undefined);
    serviceLog.end();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log(`clients: took ${((Date.now() - started) / 1000).toFixed(1)} s`);
  console.log(`clients: ${passed} passed, ${failed} failed`);
  return failed === 0 && passed > 0 ? 0 : 1;
}

interface DocShape {
  components: { schemas: Record<string, unknown> };
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    console.log(`clients: ${passed} passed, ${failed + 1} failed`);
    process.exit(1);
  },
);
