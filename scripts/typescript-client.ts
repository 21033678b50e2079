/**
 * `npm run clients:typescript`: the TypeScript client's types (test/clients/a2a-push-api.ts), made by
 * openapi-typescript from the document the api serves at /v1/openapi.json. The api app serves it here
 * on a free loopback port without a database (the document route needs none). With `--check` it
 * writes nothing and exits 1 when the file is not what the document gives today;
 * test/unit/typescript-client.test.ts runs the same comparison in `npm test`.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import pino from 'pino';
import { Registry } from 'prom-client';
import { createApiApp } from '../src/api/app';

const root = path.resolve(__dirname, '..');
export const TYPES_FILE = path.join(root, 'test', 'clients', 'a2a-push-api.ts');
/**
 * `--root-types`: `PushConfig`, `Delivery`, … exported by name beside `components`;
 * `--empty-objects-unknown`: a free-form object (a StreamResponse member) is `Record<string, unknown>`,
 * not `Record<string, never>`.
 */
export const OPENAPI_TYPESCRIPT_ARGS = [
  '--root-types',
  '--root-types-no-schema-prefix',
  '--empty-objects-unknown',
];
const HEADER =
  '// The types of the a2a-push management API for openapi-fetch: `npm run clients:typescript` writes\n' +
  '// this file from the served /v1/openapi.json; test/unit/typescript-client.test.ts fails when it is stale.\n';

/** The file's text as openapi-typescript makes it from the document served now. */
export async function generateTypes(): Promise<string> {
  const app = createApiApp({ logger: pino({ level: 'silent' }) } as never, new Registry(), async () => ({}));
  const server = http.createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/openapi.json`;
  try {
    const bin = path.join(root, 'node_modules', '.bin', 'openapi-typescript');
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(bin, [url, ...OPENAPI_TYPESCRIPT_ARGS], { maxBuffer: 16 * 1024 * 1024 }, (err, out, errOut) =>
        err ? reject(new Error(`openapi-typescript failed: ${err.message}\n${errOut}`)) : resolve(out),
      ),
    );
    return HEADER + stdout;
  } finally {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
}

async function main(): Promise<number> {
  const text = await generateTypes();
  const rel = path.relative(root, TYPES_FILE);
  if (process.argv.includes('--check')) {
    const same = fs.existsSync(TYPES_FILE) && fs.readFileSync(TYPES_FILE, 'utf8') === text;
    console.log(same ? `${rel} is up to date` : `${rel} is stale: run npm run clients:typescript`);
    return same ? 0 : 1;
  }
  fs.writeFileSync(TYPES_FILE, text);
  console.log(`wrote ${rel} (${text.split('\n').length} lines)`);
  return 0;
}

if (require.main === module)
  main().then(
    (code) => process.exit(code),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
