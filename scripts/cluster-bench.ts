/**
 * `npm run cluster:bench`: deliveries per second through the whole service — API event write →
 * outbox → dispatcher → Temporal → worker(s) → a local HTTPS receiver on 127.0.0.1 — on the dev
 * server and on real Temporal clusters with 4 and 16 history shards, with 1 and 2 workers, in one run.
 * CPU (cores) of the workers, the Temporal server and the api comes from /proc. Small on purpose: it
 * is to be folded into bench/.
 *
 *   npm run cluster:bench -- [--n 800] [--concurrency 50] [--rows dev,s4,s16] [--workers 1,2] [--rounds 1]
 *   rows: dev (the dev server as npm start runs it), s<shards> (a cluster, single layout), s<shards>-split
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ensureDatabase } from '../src/embedded/postgres';
import { startDevServer, type DevServer } from '../src/embedded/temporal';
import { Keyring } from '../src/sealing/keyring';
import { startReceiver, type Receiver } from '../test/helpers/receiver';
import { makeTestTls } from '../test/helpers/tls';
import { freePort, freePortBlock, ROOT, startCluster, type Cluster } from './cluster/cluster';
import { clusterPostgres, type ClusterPg } from './cluster/postgres';
import { startServiceProcesses } from './cluster/services';

const CLK_TCK = 100;
const log = (l: string) => process.stderr.write(`[bench] ${l}\n`);

/** utime + stime of a process and its threads, in seconds. */
function cpuSeconds(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / CLK_TCK;
  } catch {
    return 0;
  }
}

/**
 * CPU seconds of a Postgres server: the postmaster, the children it reaped (cutime, cstime) and the
 * backends alive now. Both the service's and Temporal's queries land here.
 */
function postgresCpuSeconds(dataDir: string): number {
  let postmaster: number;
  try {
    postmaster = Number(fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return 0;
  }
  const fields = (pid: number | string) => {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  };
  let ticks = 0;
  try {
    const f = fields(postmaster);
    ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
  } catch {
    return 0;
  }
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const f = fields(d);
      if (Number(f[1]) === postmaster) ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // gone meanwhile
    }
  }
  return ticks / CLK_TCK;
}

/** The whole machine's busy share (all cores), for judging how much else was running. */
function machineBusy(): { busy: number; total: number } {
  const cpu = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const idle = cpu[3]! + cpu[4]!;
  const total = cpu.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

interface Row {
  server: string;
  shards: string;
  workers: number;
  n: number;
  seconds: number;
  perSecond: number;
  duplicates: number;
  workerCores: number;
  serverCores: number;
  apiCores: number;
  postgresCores: number;
  machineBusyPct: number;
}

async function runRow(o: {
  label: string;
  shards: string;
  temporalAddress: string;
  namespace: string;
  serverPids: () => number[];
  workers: number;
  n: number;
  concurrency: number;
  pg: ClusterPg;
  pgDir: string;
  receiver: Receiver;
  caFile: string;
  logDir: string;
}): Promise<Row> {
  const db = `bench_${o.label}_${o.workers}w_${Date.now().toString(36)}`.replace(/[^a-z0-9_]/g, '_');
  await ensureDatabase(o.pg.embedded!.url('postgres'), db);
  const apiKey = `a2ap_bench_${Date.now().toString(36)}_key`;
  const services = await startServiceProcesses({
    env: {
      DATABASE_URL: o.pg.embedded!.url(db),
      TEMPORAL_ADDRESS: o.temporalAddress,
      TEMPORAL_NAMESPACE: o.namespace,
      TASK_QUEUE: `bench-${db}`,
      SEAL_KEYS: Keyring.generateEntry('bench'),
      BOOTSTRAP_API_KEY: apiKey,
      OUTBOUND_ALLOW_CIDRS: '127.0.0.1/32',
      OUTBOUND_CA_FILE: o.caFile,
      // One config takes every event: no job may be superseded.
      OUTBOX_BOUND_PER_CONFIG: '1000000',
      LOG_LEVEL: 'warn',
    },
    workers: o.workers,
    logDir: path.join(o.logDir, db),
  });
  try {
    const api = (p: string, body: unknown) =>
      globalThis.fetch(`${services.apiUrl}${p}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const task = `bench-${db}`;
    const cfg = await api(`/v1/tasks/${task}/pushNotificationConfigs`, { id: 'bench', url: o.receiver.url });
    if (cfg.status !== 201) throw new Error(`config: ${cfg.status} ${await cfg.text()}`);
    // A few deliveries first, so every process has warmed up (workflow bundle, connections).
    const before = o.receiver.requests.length;
    for (let i = 0; i < 5; i++)
      await api(`/v1/tasks/${task}/events`, {
        streamResponse: { statusUpdate: { taskId: task, status: { state: 'TASK_STATE_WORKING' } } },
      });
    await o.receiver.waitFor(before + 5, 60_000);

    const pids = services.processes;
    const workerPids = pids.filter((p) => p.kind === 'worker').map((p) => p.process.pid!);
    const apiPid = pids.find((p) => p.kind === 'api')!.process.pid!;
    const sum = (xs: number[]) => xs.reduce((a, b) => a + cpuSeconds(b), 0);
    const cpu0 = {
      w: sum(workerPids),
      s: sum(o.serverPids()),
      a: cpuSeconds(apiPid),
      p: postgresCpuSeconds(o.pgDir),
      m: machineBusy(),
    };
    const start = o.receiver.requests.length;
    const t0 = Date.now();
    let sent = 0;
    const post = async () => {
      while (sent < o.n) {
        sent++;
        const r = await api(`/v1/tasks/${task}/events`, {
          streamResponse: { statusUpdate: { taskId: task, status: { state: 'TASK_STATE_WORKING' } } },
        });
        if (r.status !== 202) throw new Error(`event: ${r.status} ${await r.text()}`);
        await r.arrayBuffer();
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, post));
    await o.receiver.waitFor(start + o.n, 600_000);
    const seconds = (Date.now() - t0) / 1000;
    const m1 = machineBusy();
    const got = o.receiver.requests.slice(start);
    const ids = new Set(got.map((r) => String(r.headers['x-a2a-push-delivery'])));
    const cores = (a: number, b: number) => (b - a) / seconds;
    const row: Row = {
      server: o.label,
      shards: o.shards,
      workers: o.workers,
      n: o.n,
      seconds,
      perSecond: o.n / seconds,
      duplicates: got.length - ids.size,
      workerCores: cores(cpu0.w, sum(workerPids)),
      serverCores: cores(cpu0.s, sum(o.serverPids())),
      apiCores: cores(cpu0.a, cpuSeconds(apiPid)),
      postgresCores: cores(cpu0.p, postgresCpuSeconds(o.pgDir)),
      machineBusyPct: (100 * (m1.busy - cpu0.m.busy)) / (m1.total - cpu0.m.total),
    };
    log(
      `${o.label} ${o.shards} shards, ${o.workers} worker(s): ${row.perSecond.toFixed(1)} deliveries/s (${o.n} in ${seconds.toFixed(1)} s), worker ${row.workerCores.toFixed(2)} / server ${row.serverCores.toFixed(2)} / api ${row.apiCores.toFixed(2)} / postgres ${row.postgresCores.toFixed(2)} cores, machine ${row.machineBusyPct.toFixed(0)}% busy, ${row.duplicates} duplicates`,
    );
    return row;
  } finally {
    await services.stop();
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      n: { type: 'string', default: '800' },
      concurrency: { type: 'string', default: '50' },
      rows: { type: 'string', default: 'dev,s4,s16' },
      workers: { type: 'string', default: '1,2' },
      rounds: { type: 'string', default: '1' },
      out: { type: 'string' },
    },
  });
  const n = Number(values.n);
  const concurrency = Number(values.concurrency);
  const workerCounts = values.workers.split(',').map(Number);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-bench-'));
  fs.chmodSync(tmp, 0o777);
  const tls = makeTestTls();
  const receiver = await startReceiver({ tls });
  const pg = await clusterPostgres({ dir: path.join(tmp, 'pg'), port: await freePort() });
  const rows: Row[] = [];
  const common = {
    n,
    concurrency,
    pg,
    pgDir: path.join(tmp, 'pg'),
    receiver,
    caFile: tls.caFile,
    logDir: path.join(tmp, 'logs'),
  };
  // Every server is up side by side before the first row, and the rows take turns (round by round),
  // so that whatever else runs on the machine falls on all of them alike.
  const servers: Array<{
    label: string;
    shards: string;
    address: string;
    namespace: string;
    pids: () => number[];
    stop: () => Promise<void>;
  }> = [];
  try {
    for (const kind of values.rows.split(',')) {
      if (kind === 'dev') {
        // As `npm start` runs it: SQLite in WAL mode with synchronous=normal, in a file.
        const dev: DevServer = await startDevServer({
          port: await freePort(),
          dbFile: path.join(tmp, 'dev', 'temporal.db'),
        });
        servers.push({
          label: 'dev server (SQLite WAL)',
          shards: '1',
          address: dev.address,
          namespace: 'default',
          pids: () => [dev.process.pid!],
          stop: () => dev.stop(),
        });
        continue;
      }
      const m = /^s(\d+)(-split)?$/.exec(kind);
      const shards = Number(m?.[1]);
      if (!m || !shards) throw new Error(`--rows: dev, s<shards> or s<shards>-split, got ${kind}`);
      const cluster: Cluster = await startCluster({
        shards,
        layout: m[2] ? 'split' : 'single',
        pg: pg.server,
        name: `bench_${kind.replace('-', '_')}`,
        dir: path.join(tmp, kind),
        port: await freePortBlock(),
        log,
      });
      servers.push({
        label: `cluster (${cluster.layout})`,
        shards: String(shards),
        address: cluster.address,
        namespace: cluster.namespace,
        pids: () => Object.values(cluster.pids),
        stop: () => cluster.stop(),
      });
    }
    for (let round = 1; round <= Number(values.rounds); round++)
      for (const workers of workerCounts)
        for (const srv of servers)
          rows.push(
            await runRow({
              ...common,
              label: srv.label,
              shards: srv.shards,
              temporalAddress: srv.address,
              namespace: srv.namespace,
              serverPids: srv.pids,
              workers,
            }),
          );
  } finally {
    for (const srv of servers) await srv.stop().catch(() => undefined);
    await receiver.close();
    await pg.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  const lines = [
    `| Temporal | history shards | workers | deliveries/s | worker cores | server cores | api cores | Postgres cores | deliveries per core-second | machine busy | duplicates |`,
    `|---|---|---|---|---|---|---|---|---|---|---|`,
    ...rows.map(
      (r) =>
        `| ${r.server} | ${r.shards} | ${r.workers} | ${r.perSecond.toFixed(1)} | ${r.workerCores.toFixed(2)} | ${r.serverCores.toFixed(2)} | ${r.apiCores.toFixed(2)} | ${r.postgresCores.toFixed(2)} | ${(r.perSecond / (r.workerCores + r.serverCores + r.apiCores + r.postgresCores)).toFixed(1)} | ${r.machineBusyPct.toFixed(0)}% | ${r.duplicates} |`,
    ),
  ];
  process.stdout.write(
    `\n${n} events, ${concurrency} in flight, ${os.cpus().length} cores\n${lines.join('\n')}\n`,
  );
  if (values.out)
    fs.writeFileSync(path.resolve(ROOT, values.out), JSON.stringify({ n, concurrency, rows }, null, 2));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
