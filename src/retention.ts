import type { Logger } from 'pino';
import type { Db } from './db/pool';

/**
 * The daily retention cleanup (contract section 7). Deletes what is older than RETENTION and no longer
 * needed: finished delivery jobs (their attempts go with them, ON DELETE CASCADE), task events left
 * with no job, processed inbox callbacks, feed items, config events, deleted push configs no job references, and
 * idempotency keys past their 24 h. Audit rows are kept (the table refuses DELETE).
 *
 * Every statement deletes at most `batchSize` rows and commits on its own, so a large backlog never
 * holds locks for long; the loop goes on until a batch comes back short.
 */

export const DAY_MS = 86_400_000;
export const IDEMPOTENCY_TTL_MS = DAY_MS;
export const RETENTION_BATCH = 5_000;
/** Session advisory lock: one cleanup at a time across every process sharing the database. */
export const RETENTION_LOCK_KEY = 8146022;

const UNFINISHED = `('queued', 'in_flight', 'waiting_retry')`;

export interface RetentionOptions {
  batchSize?: number;
  /** Checked between batches: a stopping process ends the run at the next batch boundary. */
  signal?: AbortSignal;
}

interface Step {
  table: string;
  /** $1 = cutoff, $2 = batch size; returns one row `{ n }` (and `attempts` for the jobs step). */
  sql: string;
  cutoff: 'retention' | 'idempotency';
}

const STEPS: Step[] = [
  {
    // Attempts are counted from the statement's snapshot (taken before the delete) and go by cascade.
    table: 'delivery_jobs',
    cutoff: 'retention',
    sql: `WITH batch AS (
            SELECT id FROM delivery_jobs
             WHERE finished_at < $1 AND status NOT IN ${UNFINISHED}
             ORDER BY finished_at
             LIMIT $2),
          gone AS (
            DELETE FROM delivery_jobs j USING batch b
             WHERE j.id = b.id AND j.finished_at < $1 AND j.status NOT IN ${UNFINISHED}
            RETURNING j.id)
          SELECT (SELECT count(*) FROM gone) AS n,
                 (SELECT count(*) FROM delivery_attempts a WHERE a.job_id IN (SELECT id FROM gone)) AS attempts`,
  },
  {
    // After the jobs: an event whose last job just went is gone in the same run.
    table: 'task_events',
    cutoff: 'retention',
    sql: `WITH batch AS (
            SELECT e.id FROM task_events e
             WHERE e.created_at < $1
               AND NOT EXISTS (SELECT 1 FROM delivery_jobs j WHERE j.event_id = e.id)
             ORDER BY e.id
             LIMIT $2),
          gone AS (
            DELETE FROM task_events e USING batch b
             WHERE e.id = b.id AND NOT EXISTS (SELECT 1 FROM delivery_jobs j WHERE j.event_id = e.id)
            RETURNING 1)
          SELECT count(*) AS n FROM gone`,
  },
  {
    table: 'push_configs',
    cutoff: 'retention',
    sql: `WITH batch AS (
            SELECT c.row_id FROM push_configs c
             WHERE c.deleted_at < $1
               AND NOT EXISTS (SELECT 1 FROM delivery_jobs j WHERE j.config_row_id = c.row_id)
             ORDER BY c.row_id
             LIMIT $2),
          gone AS (
            DELETE FROM push_configs c USING batch b
             WHERE c.row_id = b.row_id
               AND NOT EXISTS (SELECT 1 FROM delivery_jobs j WHERE j.config_row_id = c.row_id)
            RETURNING 1)
          SELECT count(*) AS n FROM gone`,
  },
  {
    table: 'inbox_callbacks',
    cutoff: 'retention',
    sql: `WITH batch AS (
            SELECT id FROM inbox_callbacks WHERE processed_at < $1 ORDER BY processed_at LIMIT $2),
          gone AS (
            DELETE FROM inbox_callbacks c USING batch b WHERE c.id = b.id RETURNING 1)
          SELECT count(*) AS n FROM gone`,
  },
  {
    table: 'feed_items',
    cutoff: 'retention',
    sql: `WITH batch AS (
            SELECT cursor FROM feed_items WHERE observed_at < $1 ORDER BY cursor LIMIT $2),
          gone AS (
            DELETE FROM feed_items f USING batch b WHERE f.cursor = b.cursor RETURNING 1)
          SELECT count(*) AS n FROM gone`,
  },
  {
    table: 'config_events',
    cutoff: 'retention',
    sql: `WITH batch AS (
            SELECT cursor FROM config_events WHERE created_at < $1 ORDER BY cursor LIMIT $2),
          gone AS (
            DELETE FROM config_events e USING batch b WHERE e.cursor = b.cursor RETURNING 1)
          SELECT count(*) AS n FROM gone`,
  },
  {
    // A key past its 24 h no longer answers a repeat (src/api/idempotency.ts re-claims it): drop it.
    table: 'idempotency_keys',
    cutoff: 'idempotency',
    sql: `WITH batch AS (
            SELECT tenant_id, key FROM idempotency_keys WHERE created_at < $1 LIMIT $2),
          gone AS (
            DELETE FROM idempotency_keys k USING batch b
             WHERE k.tenant_id = b.tenant_id AND k.key = b.key AND k.created_at < $1
            RETURNING 1)
          SELECT count(*) AS n FROM gone`,
  },
];

/** One cleanup pass; answers the number of rows deleted per table (delivery_attempts by cascade). */
export async function runRetention(
  db: Db,
  retentionMs: number,
  now: Date = new Date(),
  options: RetentionOptions = {},
): Promise<Record<string, number>> {
  if (!Number.isFinite(retentionMs) || retentionMs <= 0) throw new Error('retention must be positive');
  const batchSize = options.batchSize ?? RETENTION_BATCH;
  const cutoffs = {
    retention: new Date(now.getTime() - retentionMs),
    idempotency: new Date(now.getTime() - IDEMPOTENCY_TTL_MS),
  };
  const counts: Record<string, number> = {};
  for (const step of STEPS) {
    counts[step.table] = 0;
    if (step.table === 'delivery_jobs') counts.delivery_attempts = 0;
  }
  for (const step of STEPS) {
    for (;;) {
      if (options.signal?.aborted) return counts;
      const r = await db.query<{ n: string; attempts?: string }>(step.sql, [cutoffs[step.cutoff], batchSize]);
      const row = r.rows[0];
      const n = Number(row?.n ?? 0);
      counts[step.table] = (counts[step.table] ?? 0) + n;
      if (row?.attempts !== undefined)
        counts.delivery_attempts = (counts.delivery_attempts ?? 0) + Number(row.attempts);
      if (n < batchSize) break;
    }
  }
  // The inbox's total count drifts only upward (ids of rolled-back inserts, values a crash skipped):
  // recounted here, exactly, with callback writers held off for the count (migration 007).
  if (!options.signal?.aborted) await db.query('SELECT inbox_total_recount()');
  return counts;
}

/**
 * Runs the cleanup shortly after start, then every `intervalMs`. The timers are unref'd (they never
 * keep a process alive), a failed run is logged and retried at the next tick, and with several
 * processes on one database only one of them runs a pass at a time (advisory lock).
 */
export function startRetentionTimer(
  db: Db,
  retentionMs: number,
  logger: Logger,
  intervalMs: number = DAY_MS,
  firstRunMs: number = Math.min(60_000, intervalMs),
): { stop(): void } {
  const abort = new AbortController();
  let timer: NodeJS.Timeout | undefined;

  const schedule = (ms: number) => {
    if (abort.signal.aborted) return;
    timer = setTimeout(() => void tick(), ms);
    timer.unref();
  };

  const tick = async () => {
    const started = Date.now();
    try {
      const client = await db.connect();
      try {
        const lock = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [
          RETENTION_LOCK_KEY,
        ]);
        if (!lock.rows[0]?.ok) {
          logger.debug('retention: another process is running the cleanup');
        } else {
          try {
            const counts = await runRetention(db, retentionMs, new Date(), { signal: abort.signal });
            const total = Object.values(counts).reduce((a, b) => a + b, 0);
            logger[total > 0 ? 'info' : 'debug'](
              { counts, durationMs: Date.now() - started },
              'retention cleanup done',
            );
          } finally {
            await client.query('SELECT pg_advisory_unlock($1)', [RETENTION_LOCK_KEY]).catch(() => undefined);
          }
        }
      } finally {
        client.release();
      }
    } catch (err) {
      if (!abort.signal.aborted) logger.error({ err }, 'retention cleanup failed');
    }
    schedule(intervalMs);
  };

  schedule(firstRunMs);
  return {
    stop() {
      abort.abort();
      if (timer) clearTimeout(timer);
    },
  };
}
