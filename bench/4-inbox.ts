import path from 'node:path';
import { Client as PgClient } from 'pg';
import { createPool, migrate } from '../src/db/pool';
import { ApiClient } from './lib/api';
import type { Benchmark, BenchContext } from './lib/context';
import { failedAnswers, load, type LoadResult } from './lib/load';
import { figure, type Figure } from './lib/report';
import { freshDatabase, spawnBenchProcess, startServices } from './lib/stack';
import { cpuSeconds, freePort, postgresCpuSeconds, round } from './lib/util';

interface Registration {
  id: string;
  pushNotificationConfig: { url: string; authentication: { credentials: string } };
}

const CONNECTIONS = 32;

/** CPU milliseconds per answered callback, by process: robust to a noisy machine, and says where it goes. */
interface CpuPerCallback {
  server: number;
  postgres: number;
  temporal?: number;
}

/** Runs a load and measures the CPU its serving process, Postgres and (ours) the dev server spent on it. */
async function measured(
  ctx: BenchContext,
  pids: { server: number; temporal?: number },
  run: () => Promise<LoadResult>,
): Promise<{ result: LoadResult; cpu: CpuPerCallback }> {
  const pgDir = path.join(ctx.dir, 'pg');
  const take = () => ({
    server: cpuSeconds(pids.server),
    postgres: postgresCpuSeconds(pgDir),
    temporal: pids.temporal ? cpuSeconds(pids.temporal) : 0,
  });
  const before = take();
  const result = await run();
  const after = take();
  // Per stored (2xx) callback: what a refused one cost is charged to those that were stored.
  const per = (k: keyof typeof before) =>
    round(((after[k] - before[k]) * 1000) / Math.max(1, result.ok2xx), 3);
  return {
    result,
    cpu: {
      server: per('server'),
      postgres: per('postgres'),
      ...(pids.temporal ? { temporal: per('temporal') } : {}),
    },
  };
}
const body = (i: number) =>
  JSON.stringify({
    statusUpdate: { taskId: `rt-${i}`, contextId: 'ctx', status: { state: 'TASK_STATE_WORKING' } },
  });

/**
 * Callbacks stored per commit: rows over distinct received_at (its default now() is the transaction's
 * start, so the rows of one statement share it). 1 for the row-at-a-time baseline.
 */
async function rowsPerCommit(databaseUrl: string): Promise<number> {
  const c = new PgClient({ connectionString: databaseUrl });
  await c.connect();
  try {
    const r = await c.query<{ rows: string; commits: string }>(
      'SELECT count(*) AS rows, count(DISTINCT received_at) AS commits FROM inbox_callbacks',
    );
    return round(Number(r.rows[0]!.rows) / Math.max(1, Number(r.rows[0]!.commits)), 2);
  } finally {
    await c.end();
  }
}

interface Measured {
  result: LoadResult;
  cpu: CpuPerCallback;
  rowsPerCommit: number;
}

/** Our inbox process (and an api to create 100 embedded registrations), loaded by autocannon. */
async function loadOurs(
  ctx: BenchContext,
  temporal: { address: string; pid?: number },
  durationS: number,
): Promise<Measured & { ids: string[] }> {
  const databaseUrl = await freshDatabase(ctx.pg);
  const services = await startServices({
    dir: ctx.dir,
    databaseUrl,
    temporalAddress: temporal.address,
    caFile: ctx.receiver.tls.caFile,
    start: { workers: false },
    env: { INBOX_BOUND_PER_REGISTRATION: '10000000', INBOX_BOUND_TOTAL: '100000000' },
  });
  try {
    const api = new ApiClient(services.api.url, services.apiKey, 8);
    const regs: Registration[] = [];
    for (let i = 0; i < 100; i++) {
      const r = await api.call('POST', '/v1/registrations', {
        mode: 'embedded',
        agent: { url: 'https://127.0.0.1:9/agent' },
      });
      if (r.status !== 201) throw new Error(`registration: ${r.status} ${JSON.stringify(r.json)}`);
      regs.push(r.json as Registration);
    }
    await api.close();
    let k = 0;
    const pids = { server: services.inbox.pid, ...(temporal.pid ? { temporal: temporal.pid } : {}) };
    const { result, cpu } = await measured(ctx, pids, () =>
      load({
        url: services.inbox.url,
        connections: CONNECTIONS,
        durationS,
        next: () => {
          const reg = regs[k++ % regs.length]!;
          return {
            path: new URL(reg.pushNotificationConfig.url).pathname,
            headers: {
              'content-type': 'application/a2a+json',
              authorization: `Bearer ${reg.pushNotificationConfig.authentication.credentials}`,
            },
            body: body(k),
          };
        },
      }),
    );
    return { result, ids: regs.map((r) => r.id), cpu, rowsPerCommit: await rowsPerCommit(databaseUrl) };
  } finally {
    await services.stop();
  }
}

/**
 * The baseline in its own process and database (same schema and registrations): one INSERT per
 * callback committed alone, or (`batched`) the same rows through the inbox's group commit, one
 * multi-row INSERT per batch.
 */
async function loadBaseline(
  ctx: BenchContext,
  ids: string[],
  durationS: number,
  batched: boolean,
): Promise<Measured> {
  const url = await freshDatabase(ctx.pg);
  const db = createPool(url, 2);
  await migrate(db);
  await db.query("INSERT INTO tenants (id) VALUES ('default') ON CONFLICT DO NOTHING");
  await db.query(
    `INSERT INTO registrations (id, tenant_id, mode, status, agent_url, push_enabled)
     SELECT unnest($1::uuid[]), 'default', 'embedded', 'pending', 'https://127.0.0.1:9/agent', true`,
    [ids],
  );
  await db.end();
  const baseline = await spawnBenchProcess(path.join(__dirname, 'lib', 'baseline-server.ts'), [
    url,
    'default',
  ]);
  try {
    let k = 0;
    const route = batched ? 'push-batched' : 'push';
    const m = await measured(ctx, { server: baseline.pid }, () =>
      load({
        url: `http://127.0.0.1:${baseline.ready}`,
        connections: CONNECTIONS,
        durationS,
        next: () => ({
          path: `/a2a/${route}/${ids[k++ % ids.length]!}`,
          headers: { 'content-type': 'application/a2a+json' },
          body: body(k),
        }),
      }),
    );
    return { ...m, rowsPerCommit: await rowsPerCommit(url) };
  } finally {
    await baseline.stop();
  }
}

export const inboxBenchmark: Benchmark = {
  name: 'inbox',
  title: '4. Inbox accept: valid callbacks at 32 concurrent senders over 100 registrations',
  async run(ctx) {
    const durationS = ctx.quick ? 5 : 15;
    const temporal = await ctx.temporal();
    ctx.log('ours: the inbox process, signalling the dev server');
    const up = await loadOurs(ctx, temporal, durationS);
    ctx.log('baseline: bare Express + pg insert, each row committed alone');
    const b = await loadBaseline(ctx, up.ids, durationS, false);
    ctx.log('baseline, batched: the same insert through the same group commit (multi-row INSERT)');
    const bb = await loadBaseline(ctx, up.ids, durationS, true);
    ctx.log('ours with Temporal unreachable (no signal reaches a server)');
    const down = await loadOurs(ctx, { address: `127.0.0.1:${await freePort()}` }, durationS);
    const o = up.result;
    const d = down.result;
    const bl = b.result;
    const bbl = bb.result;
    const figures: Figure[] = [
      figure(
        'ours callbacks/s',
        o.rps,
        '/s',
        { label: 'baseline', value: bl.rps },
        { text: '≥ 0.8 × baseline', met: o.rps >= 0.8 * bl.rps },
      ),
      figure('ours callbacks/s', o.rps, '/s', { label: 'batched baseline', value: bbl.rps }),
      figure('ours p50', o.p50, 'ms', { label: 'baseline p50', value: bl.p50 }),
      figure(
        'ours p99',
        o.p99,
        'ms',
        { label: 'baseline p99', value: bl.p99 },
        { text: '≤ 1.5 × baseline p99', met: o.p99 <= 1.5 * bl.p99 },
      ),
      figure('ours p50', o.p50, 'ms', { label: 'batched baseline p50', value: bbl.p50 }),
      figure('ours p99', o.p99, 'ms', { label: 'batched baseline p99', value: bbl.p99 }),
      figure('callbacks per commit: ours', up.rowsPerCommit, 'rows', {
        label: 'batched baseline',
        value: bb.rowsPerCommit,
      }),
      figure('callbacks per commit: baseline (each alone)', b.rowsPerCommit, 'rows'),
      figure('ours, Temporal unreachable: callbacks/s', d.rps, '/s', { label: 'baseline', value: bl.rps }),
      figure('ours, Temporal unreachable: p99', d.p99, 'ms', { label: 'baseline p99', value: bl.p99 }),
      figure('CPU per callback: inbox process', up.cpu.server, 'ms', {
        label: 'baseline process',
        value: b.cpu.server,
      }),
      figure('CPU per callback: Postgres', up.cpu.postgres, 'ms', {
        label: 'baseline Postgres',
        value: b.cpu.postgres,
      }),
      figure('CPU per callback: inbox process', up.cpu.server, 'ms', {
        label: 'batched baseline process',
        value: bb.cpu.server,
      }),
      figure('CPU per callback: Postgres', up.cpu.postgres, 'ms', {
        label: 'batched baseline Postgres',
        value: bb.cpu.postgres,
      }),
      figure('CPU per callback: dev server (signals)', up.cpu.temporal ?? 0, 'ms'),
      figure('CPU per callback, Temporal unreachable: inbox process', down.cpu.server, 'ms', {
        label: 'baseline process',
        value: b.cpu.server,
      }),
    ];
    figures.push(
      figure('failed answers (non-2xx + errors): ours', failedAnswers(o), 'answers', {
        label: 'baseline',
        value: failedAnswers(bl),
      }),
      figure('failed answers: batched baseline', failedAnswers(bbl), 'answers'),
      figure('failed answers: ours, Temporal unreachable', failedAnswers(d), 'answers'),
    );
    const bench = '4 inbox';
    return {
      name: this.name,
      title: this.title,
      figures,
      chart: [
        { bench, series: 'ours', metric: 'throughput', value: o.rps, unit: 'callbacks/s' },
        {
          bench,
          series: 'ours, Temporal unreachable',
          metric: 'throughput',
          value: d.rps,
          unit: 'callbacks/s',
        },
        { bench, series: 'baseline', metric: 'throughput', value: bl.rps, unit: 'callbacks/s' },
        {
          bench,
          series: 'batched baseline',
          metric: 'throughput',
          value: bbl.rps,
          unit: 'callbacks/s',
        },
        { bench, series: 'ours', metric: 'p50', value: o.p50, unit: 'ms' },
        { bench, series: 'ours', metric: 'p99', value: o.p99, unit: 'ms' },
        { bench, series: 'baseline', metric: 'p50', value: bl.p50, unit: 'ms' },
        { bench, series: 'baseline', metric: 'p99', value: bl.p99, unit: 'ms' },
        { bench, series: 'batched baseline', metric: 'p50', value: bbl.p50, unit: 'ms' },
        { bench, series: 'batched baseline', metric: 'p99', value: bbl.p99, unit: 'ms' },
      ],
      notes: [
        `autocannon, ${CONNECTIONS} connections, ${durationS} s each, round-robin over 100 embedded registrations; bounds raised to 10,000,000 per registration and 100,000,000 in all.`,
        "Ours: Bearer check, media type, StreamResponse validation, bounds, durable insert (callbacks arriving together share one statement and commit; each answer waits for its own commit), then a signal for a registration's first unprocessed callback (coalesced) to the dev server on this machine (no worker). Baseline: one INSERT of the same row per request, committed alone, no check. Batched baseline: the same rows through the inbox's own GroupCommit (2 statements in flight, at most 64 rows each), one multi-row INSERT per batch: ours ÷ batched is what the rest of ours costs, batched ÷ baseline what the group commit buys.",
        "req/s counts 2xx answers only; latencies are of the 2xx answers; CPU per callback is per 2xx answer; callbacks per commit: rows over distinct received_at (one per transaction) in each side's database.",
      ],
      details: {
        ours: o,
        oursTemporalUnreachable: d,
        baseline: bl,
        batchedBaseline: bbl,
        cpuMsPerCallback: {
          ours: up.cpu,
          oursTemporalUnreachable: down.cpu,
          baseline: b.cpu,
          batchedBaseline: bb.cpu,
        },
        rowsPerCommit: {
          ours: up.rowsPerCommit,
          oursTemporalUnreachable: down.rowsPerCommit,
          baseline: b.rowsPerCommit,
          batchedBaseline: bb.rowsPerCommit,
        },
      },
    };
  },
};
