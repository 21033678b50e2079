/**
 * Runs outside jest, in its own process that outlives the test workers: starts a fresh embedded Postgres
 * and an in-memory Temporal dev server on free ports, prints one JSON line, and stops both when its
 * stdin closes or it is signalled. Used by test/helpers/global-setup.ts.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EmbeddedPostgresError, startEmbeddedPostgres } from '../../src/embedded/postgres';
import { startDevServer } from '../../src/embedded/temporal';
import { freePortBlock, startCluster } from '../../scripts/cluster/cluster';
import { freePort } from './test-services-port';
import { pgServerFromUrl } from '../../scripts/cluster/postgres';

/**
 * The dev server on a free port. The port is free when chosen, not when the server binds it, and the
 * server picks more ports of its own (HTTP, metrics, its internal services): another process may take
 * one in between, and the server exits at start. That is retried on new ports, twice.
 */
async function startTestDevServer() {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      return await startDevServer({ port });
    } catch (err) {
      const message = (err as Error).message;
      if (attempt >= 3 || !message.includes('exited with')) throw err;
      process.stderr.write(`[test-services] ${message}; starting it again on another port\n`);
    }
  }
}

async function main() {
  // Private (0700), like a clone in /root: as root, embedded Postgres must work without reaching it by path.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-test-'));
  const pgPort = await freePort();
  const pg = await startEmbeddedPostgres({ dir: path.join(dir, 'pg'), port: pgPort, fsync: false });
  const withTemporal = process.argv.includes('--temporal');
  const temporal = withTemporal ? await startTestDevServer() : undefined;
  // --cluster-ui PORT: a real Temporal server (npm run cluster's) over this Postgres, its Web UI on PORT.
  const uiArg = process.argv.indexOf('--cluster-ui');
  const cluster =
    uiArg > 0
      ? await startCluster({
          shards: 4,
          layout: 'single',
          pg: pgServerFromUrl(pg.url('postgres')),
          name: 'webui',
          dir: path.join(dir, 'cluster'),
          port: await freePortBlock(),
          uiPort: Number(process.argv[uiArg + 1]),
          log: (l) => process.stderr.write(`[cluster] ${l}\n`),
        })
      : undefined;
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await temporal?.stop().catch(() => undefined);
    await cluster?.stop().catch(() => undefined);
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
    JSON.stringify({
      pgAdminUrl: pg.url('postgres'),
      temporalAddress: temporal?.address ?? cluster?.address ?? null,
      uiUrl: cluster?.uiUrl ?? null,
    }) + '\n',
  );
}

main().catch((err: unknown) => {
  console.error(err instanceof EmbeddedPostgresError ? err.message : err);
  process.exit(1);
});
