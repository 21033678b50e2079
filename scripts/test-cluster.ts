/**
 * `npm run test:cluster`: the integration suite (test/integration) against a real Temporal server —
 * built from its Go module, single layout, 4 history shards, over a fresh embedded Postgres — instead
 * of the dev server. Extra arguments go to jest (e.g. a test file). `.ci/run` runs it after `npm test`.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  freePort,
  freePortBlock,
  registerNamespace,
  ROOT,
  startCluster,
  type Cluster,
} from './cluster/cluster';
import { clusterPostgres, type ClusterPg } from './cluster/postgres';

/** The namespace whose continue-as-new suggestion comes early (test/integration/continue-as-new.test.ts). */
const CAN_NAMESPACE = 'a2a-push-can';

async function main(): Promise<number> {
  const log = (l: string) => process.stderr.write(`[test:cluster] ${l}\n`);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-cluster-'));
  let pg: ClusterPg | undefined;
  let cluster: Cluster | undefined;
  const started = Date.now();
  try {
    pg = await clusterPostgres({ dir: path.join(tmp, 'pg'), port: await freePort() });
    cluster = await startCluster({
      shards: 4,
      layout: 'single',
      pg: pg.server,
      name: 'test',
      dir: path.join(tmp, 'cluster'),
      port: await freePortBlock(),
      dynamicConfig: {
        'limit.historyCount.suggestContinueAsNew': [{ value: 40, constraints: { namespace: CAN_NAMESPACE } }],
      },
      log,
    });
    await registerNamespace(cluster.address, CAN_NAMESPACE, { log });
    log(`cluster up in ${((Date.now() - started) / 1000).toFixed(1)} s; running jest test/integration`);
    const args = process.argv.slice(2);
    const jest = spawn(
      process.execPath,
      [
        path.join(ROOT, 'node_modules', 'jest', 'bin', 'jest.js'),
        ...(args.length ? args : ['test/integration']),
      ],
      {
        cwd: ROOT,
        stdio: 'inherit',
        env: {
          ...process.env,
          TEMPORAL_ADDRESS: cluster.address,
          TEMPORAL_NAMESPACE: cluster.namespace,
          TEST_TEMPORAL_CAN_NAMESPACE: CAN_NAMESPACE,
        },
      },
    );
    const code = await new Promise<number>((resolve) => jest.once('exit', (c) => resolve(c ?? 1)));
    log(`jest exited ${code} after ${((Date.now() - started) / 1000).toFixed(1)} s in all`);
    return code;
  } finally {
    await cluster?.stop().catch(() => undefined);
    await pg?.stop().catch(() => undefined);
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
