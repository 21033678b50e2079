import crypto from 'node:crypto';
import type { Logger } from 'pino';
import type { Db } from '../../src/db/pool';
import { runRetention, startRetentionTimer } from '../../src/retention';
import { createTestDb, type TestDb } from '../helpers/db';

const DAY = 86_400_000;
const RETENTION = 30 * DAY;
const T = 'tenant-retention';

let t: TestDb;
let db: Db;

beforeAll(async () => {
  t = await createTestDb();
  db = t.db;
  await db.query('INSERT INTO tenants (id) VALUES ($1)', [T]);
});

afterAll(async () => {
  await t?.drop();
});

const ago = (ms: number) => new Date(Date.now() - ms);

async function event(createdAgo: number): Promise<string> {
  const r = await db.query<{ id: string }>(
    `INSERT INTO task_events (tenant_id, task_id, kind, body, created_at)
     VALUES ($1, 'task-1', 'statusUpdate', '{}', $2) RETURNING id`,
    [T, ago(createdAgo)],
  );
  return r.rows[0]!.id;
}

async function config(o: { deletedAgo?: number } = {}): Promise<string> {
  const r = await db.query<{ row_id: string }>(
    `INSERT INTO push_configs (tenant_id, task_id, id, url, created_at, deleted_at)
     VALUES ($1, 'task-1', $2, 'https://example.com/hook', $3, $4) RETURNING row_id`,
    [
      T,
      `cfg-${crypto.randomBytes(4).toString('hex')}`,
      ago(60 * DAY),
      o.deletedAgo === undefined ? null : ago(o.deletedAgo),
    ],
  );
  return r.rows[0]!.row_id;
}

async function job(
  eventId: string,
  configRowId: string,
  status: string,
  finishedAgo?: number,
  retryOf?: string,
): Promise<string> {
  const id = crypto.randomUUID();
  await db.query(
    `INSERT INTO delivery_jobs (id, tenant_id, event_id, config_row_id, task_id, config_id, status, deadline,
                                created_at, finished_at, retry_of)
     VALUES ($1, $2, $3, $4, 'task-1', 'cfg', $5, now(), $6, $7, $8)`,
    [
      id,
      T,
      eventId,
      configRowId,
      status,
      ago(60 * DAY),
      finishedAgo === undefined ? null : ago(finishedAgo),
      retryOf ?? null,
    ],
  );
  return id;
}

async function attempts(jobId: string, n: number): Promise<void> {
  for (let i = 1; i <= n; i++)
    await db.query(
      `INSERT INTO delivery_attempts (job_id, n, started_at, outcome) VALUES ($1, $2, now(), 'retry')`,
      [jobId, i],
    );
}

async function registration(): Promise<string> {
  const id = crypto.randomUUID();
  await db.query(
    `INSERT INTO registrations (id, tenant_id, mode, status, agent_url, remote_task_id, push_enabled)
     VALUES ($1, $2, 'separate', 'active', 'https://agent.example.com', 'remote-1', true)`,
    [id, T],
  );
  return id;
}

async function callback(registrationId: string, processedAgo?: number, receivedAgo = 40 * DAY) {
  const r = await db.query<{ id: string }>(
    `INSERT INTO inbox_callbacks (registration_id, received_at, kind, body, processed_at)
     VALUES ($1, $2, 'statusUpdate', '{}', $3) RETURNING id`,
    [registrationId, ago(receivedAgo), processedAgo === undefined ? null : ago(processedAgo)],
  );
  return r.rows[0]!.id;
}

async function feedItem(registrationId: string, observedAgo: number, terminal = false) {
  const r = await db.query<{ cursor: string }>(
    `INSERT INTO feed_items (tenant_id, registration_id, remote_task_id, kind, state, terminal, observed_at)
     VALUES ($1, $2, 'remote-1', 'state', 'TASK_STATE_INPUT_REQUIRED', $3, $4) RETURNING cursor`,
    [T, registrationId, terminal, ago(observedAgo)],
  );
  return r.rows[0]!.cursor;
}

async function configEvent(createdAgo: number) {
  const r = await db.query<{ cursor: string }>(
    `INSERT INTO config_events (tenant_id, task_id, config_id, kind, reason, at, created_at)
     VALUES ($1, 'task-1', 'c', 'stopped', 'http_410', $2, $2) RETURNING cursor`,
    [T, ago(createdAgo)],
  );
  return r.rows[0]!.cursor;
}

async function idempotencyKey(createdAgo: number) {
  const key = `idem-${crypto.randomBytes(4).toString('hex')}`;
  await db.query(
    `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, created_at)
     VALUES ($1, $2, '\\x00', 201, $3)`,
    [T, key, ago(createdAgo)],
  );
  return key;
}

const exists = async (table: string, column: string, value: string) =>
  (await db.query(`SELECT 1 FROM ${table} WHERE ${column} = $1`, [value])).rowCount === 1;

const count = async (table: string) =>
  Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`)).rows[0]!.n);

async function clear() {
  for (const table of [
    'delivery_attempts',
    'delivery_jobs',
    'task_events',
    'push_configs',
    'inbox_callbacks',
    'feed_items',
    'config_events',
    'registrations',
    'idempotency_keys',
  ])
    await db.query(`DELETE FROM ${table}`);
}

describe('runRetention', () => {
  beforeEach(clear);

  it('deletes exactly the old finished rows and keeps unfinished, recent and audit rows', async () => {
    const live = await config();
    // An old finished job with attempts on a config deleted long ago: job, attempts, event, config go.
    const goneConfig = await config({ deletedAgo: 40 * DAY });
    const eOld = await event(40 * DAY);
    const jOld = await job(eOld, goneConfig, 'delivered', 40 * DAY);
    await attempts(jOld, 2);
    // Finished in every terminal way, long ago: all go.
    const eMany = await event(45 * DAY);
    const oldFinished = [];
    for (const status of [
      'failed',
      'exhausted',
      'expired',
      'cancelled',
      'superseded',
      'auth_failed',
      'stopped',
    ])
      oldFinished.push(await job(eMany, live, status, 31 * DAY));
    // A recent finished job keeps its old event and its deleted config; its retry_of is cleared.
    const keptConfig = await config({ deletedAgo: 40 * DAY });
    const eRecentJob = await event(40 * DAY);
    const jRecent = await job(eRecentJob, keptConfig, 'failed', 10 * DAY, jOld);
    await attempts(jRecent, 1);
    // Unfinished jobs stay whatever their age.
    const eUnfinished = await event(90 * DAY);
    const unfinished = [
      await job(eUnfinished, live, 'queued'),
      await job(eUnfinished, live, 'in_flight'),
      await job(eUnfinished, live, 'waiting_retry'),
    ];
    await attempts(unfinished[2]!, 3);
    // One event with an old and a recent finished job: the old job goes, the event stays.
    const eMixed = await event(50 * DAY);
    const jMixedOld = await job(eMixed, live, 'delivered', 35 * DAY);
    const jMixedNew = await job(eMixed, live, 'delivered', 1 * DAY);
    // Events with no job: the old one goes, the recent one stays.
    const eOrphanOld = await event(31 * DAY);
    const eOrphanNew = await event(29 * DAY);
    // Deleted configs: recently deleted stays; a live config of any age stays.
    const recentlyDeleted = await config({ deletedAgo: 5 * DAY });

    const reg = await registration();
    const cbOld = await callback(reg, 31 * DAY);
    const cbNew = await callback(reg, 1 * DAY);
    const cbUnprocessed = await callback(reg, undefined, 90 * DAY);
    const fOld = await feedItem(reg, 31 * DAY);
    const fOldTerminal = await feedItem(reg, 40 * DAY, true);
    const fNew = await feedItem(reg, 29 * DAY);
    const ceOld = await configEvent(31 * DAY);
    const ceNew = await configEvent(29 * DAY);
    const kOld = await idempotencyKey(25 * 3_600_000);
    const kNew = await idempotencyKey(23 * 3_600_000);
    await db.query(
      `INSERT INTO audit_log (tenant_id, at, actor, action, object_type, object_id, before, after)
       VALUES ($1, $2, 'system', 'push_config.deleted', 'push_config', 'task-1/x', 'active', 'deleted')`,
      [T, ago(400 * DAY)],
    );
    const auditBefore = await count('audit_log');

    const counts = await runRetention(db, RETENTION);

    expect(counts).toEqual({
      delivery_jobs: 1 + oldFinished.length + 1,
      delivery_attempts: 2,
      task_events: 3, // eOld, eMany, eOrphanOld
      push_configs: 1, // goneConfig
      inbox_callbacks: 1,
      feed_items: 2,
      config_events: 1,
      idempotency_keys: 1,
    });
    for (const id of [jOld, jMixedOld, ...oldFinished])
      expect(await exists('delivery_jobs', 'id', id)).toBe(false);
    for (const id of [jRecent, jMixedNew, ...unfinished])
      expect(await exists('delivery_jobs', 'id', id)).toBe(true);
    expect(await count('delivery_attempts')).toBe(1 + 3);
    expect((await db.query('SELECT retry_of FROM delivery_jobs WHERE id = $1', [jRecent])).rows[0]).toEqual({
      retry_of: null,
    });
    for (const id of [eOld, eMany, eOrphanOld]) expect(await exists('task_events', 'id', id)).toBe(false);
    for (const id of [eRecentJob, eUnfinished, eMixed, eOrphanNew])
      expect(await exists('task_events', 'id', id)).toBe(true);
    expect(await exists('push_configs', 'row_id', goneConfig)).toBe(false);
    for (const id of [live, keptConfig, recentlyDeleted])
      expect(await exists('push_configs', 'row_id', id)).toBe(true);
    expect(await exists('inbox_callbacks', 'id', cbOld)).toBe(false);
    expect(await exists('inbox_callbacks', 'id', cbNew)).toBe(true);
    expect(await exists('inbox_callbacks', 'id', cbUnprocessed)).toBe(true);
    expect(await exists('feed_items', 'cursor', fOld)).toBe(false);
    expect(await exists('feed_items', 'cursor', fOldTerminal)).toBe(false);
    expect(await exists('feed_items', 'cursor', fNew)).toBe(true);
    expect(await exists('config_events', 'cursor', ceOld)).toBe(false);
    expect(await exists('config_events', 'cursor', ceNew)).toBe(true);
    expect(await exists('idempotency_keys', 'key', kOld)).toBe(false);
    expect(await exists('idempotency_keys', 'key', kNew)).toBe(true);
    expect(await exists('registrations', 'id', reg)).toBe(true);
    expect(await count('audit_log')).toBe(auditBefore);

    // A second pass finds nothing more.
    const again = await runRetention(db, RETENTION);
    expect(Object.values(again).every((n) => n === 0)).toBe(true);
  });

  it('works through a backlog in bounded batches', async () => {
    const reg = await registration();
    const cfg = await config();
    const e = await event(40 * DAY);
    for (let i = 0; i < 7; i++) await feedItem(reg, 40 * DAY);
    for (let i = 0; i < 5; i++) await job(e, cfg, 'delivered', 40 * DAY);
    await feedItem(reg, DAY);
    const counts = await runRetention(db, RETENTION, new Date(), { batchSize: 3 });
    expect(counts.feed_items).toBe(7);
    expect(counts.delivery_jobs).toBe(5);
    expect(counts.task_events).toBe(1);
    expect(await count('feed_items')).toBe(1);
    expect(await count('delivery_jobs')).toBe(0);
  });

  it('measures age from the given now', async () => {
    const reg = await registration();
    await feedItem(reg, 10 * DAY);
    expect((await runRetention(db, RETENTION)).feed_items).toBe(0);
    expect((await runRetention(db, RETENTION, new Date(Date.now() + 21 * DAY))).feed_items).toBe(1);
  });

  it('stops at a batch boundary when aborted', async () => {
    const reg = await registration();
    await feedItem(reg, 40 * DAY);
    const ac = new AbortController();
    ac.abort();
    const counts = await runRetention(db, RETENTION, new Date(), { signal: ac.signal });
    expect(counts.feed_items).toBe(0);
    expect(await count('feed_items')).toBe(1);
  });
});

function fakeLogger() {
  const calls: Array<{ level: string; obj: unknown; msg?: string }> = [];
  const at =
    (level: string) =>
    (obj: unknown, msg?: string): void => {
      calls.push({ level, obj, ...(msg === undefined ? {} : { msg }) });
    };
  const logger = { info: at('info'), debug: at('debug'), error: at('error'), warn: at('warn') };
  return { logger: logger as unknown as Logger, calls };
}

async function until(check: () => Promise<boolean> | boolean, ms = 10_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('startRetentionTimer', () => {
  beforeEach(clear);

  it('runs shortly after start and again at every interval, logging what it deleted', async () => {
    const reg = await registration();
    await feedItem(reg, 40 * DAY);
    const { logger, calls } = fakeLogger();
    const timer = startRetentionTimer(db, RETENTION, logger, 200, 10);
    try {
      await until(async () => (await count('feed_items')) === 0);
      await until(() => calls.some((c) => c.level === 'info' && c.msg === 'retention cleanup done'));
      await feedItem(reg, 40 * DAY);
      await until(async () => (await count('feed_items')) === 0);
      expect(calls.filter((c) => c.level === 'error')).toEqual([]);
    } finally {
      timer.stop();
    }
  });

  it('logs a failed run instead of throwing, and tries again at the next tick', async () => {
    let tries = 0;
    const broken = {
      connect: () => {
        tries++;
        return Promise.reject(new Error('database down'));
      },
    } as unknown as Db;
    const { logger, calls } = fakeLogger();
    const timer = startRetentionTimer(broken, RETENTION, logger, 20, 5);
    try {
      await until(() => tries >= 2);
      expect(calls.some((c) => c.level === 'error' && c.msg === 'retention cleanup failed')).toBe(true);
    } finally {
      timer.stop();
    }
  });

  it('does nothing after stop; without the stop its first run comes', async () => {
    const reg = await registration();
    await feedItem(reg, 40 * DAY);
    const { logger, calls } = fakeLogger();
    // Counts the runs that begin (each begins by taking a connection) and goes no further.
    let connects = 0;
    const counting = {
      connect: () => {
        connects++;
        return Promise.reject(new Error('counted only'));
      },
    } as unknown as Db;
    // On jest's clock: every timer the cleanup left behind is run out, no real time passes.
    jest.useFakeTimers();
    try {
      const started = startRetentionTimer(counting, RETENTION, logger, 50, 50);
      jest.advanceTimersByTime(49);
      started.stop();
      jest.runAllTimers();
      expect(connects).toBe(0);
      // The same without stop: its first run starts at 50 ms.
      const running = startRetentionTimer(counting, RETENTION, logger, 50, 50);
      jest.advanceTimersByTime(50);
      running.stop();
      expect(connects).toBe(1);
    } finally {
      jest.useRealTimers();
    }
    expect(await count('feed_items')).toBe(1);
    expect(calls).toEqual([]);
  });

  it('lets one process at a time run a pass (advisory lock)', async () => {
    const reg = await registration();
    await feedItem(reg, 40 * DAY);
    const holder = await db.connect();
    try {
      await holder.query('SELECT pg_advisory_lock(8146022)');
      const { logger, calls } = fakeLogger();
      const timer = startRetentionTimer(db, RETENTION, logger, 60_000, 5);
      await until(() => calls.some((c) => c.level === 'debug'));
      timer.stop();
      expect(await count('feed_items')).toBe(1);
    } finally {
      await holder.query('SELECT pg_advisory_unlock(8146022)');
      holder.release();
    }
  });
});
