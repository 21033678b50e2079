import { inTx, preparedStatement, type Db } from '../db/pool';
import type { HealthRule } from '../delivery/health';
import type { DueJob } from '../delivery/types';

/** The relay's statements on the outbox (migration 020): claims, marks, turns, repairs, its gauges. */

/** A due job a claim run took, leased to it. */
export interface ClaimedJob extends DueJob {
  /** Commit order. */
  seq: number;
  /** It had its turn (a first contact past its tenant's rate, `start_after`): it takes no other. */
  hadTurn: boolean;
}

/**
 * Claims up to `batch` due jobs whose workflow has not started and that no process holds, leased for
 * `leaseMs`, round robin by tenant, each tenant's in commit order. `tenants` walks the distinct tenants
 * with due jobs on the (tenant_id, seq) index, one probe each; `ranked` reads each one's oldest `batch`
 * on the same index and keeps the first 2 × `batch` of them (room for rows a concurrent claim takes);
 * `picked` locks the first `batch`, re-checking the lease. The range on tenant_id, rather than `=`,
 * keeps the planner on that index (with `=` it read a small tenant's jobs along `seq`, filtering out a
 * big tenant's 100,000). A job past its turn (`start_after`) waits for it.
 */
export async function claimDue(db: Db, batch: number, leaseMs: number): Promise<ClaimedJob[]> {
  const r = await db.query<{
    id: string;
    seq: string;
    rn: string;
    tenant_id: string;
    task_id: string;
    config_id: string;
    request_id: string | null;
    traceparent: string | null;
    url: string;
    had_turn: boolean;
  }>(claimStatement([batch, leaseMs]));
  return r.rows
    .sort((a, b) => Number(a.rn) - Number(b.rn) || Number(a.seq) - Number(b.seq))
    .map((j) => ({
      id: j.id,
      seq: Number(j.seq),
      tenantId: j.tenant_id,
      taskId: j.task_id,
      configId: j.config_id,
      url: j.url,
      requestId: j.request_id,
      traceparent: j.traceparent,
      hadTurn: j.had_turn,
    }));
}

const DUE = `d.dispatched_at IS NULL AND d.held_by IS NULL AND d.status = 'queued'`;
const FREE = `(d.dispatch_lease IS NULL OR d.dispatch_lease < now()) AND (d.start_after IS NULL OR d.start_after <= now())`;

const claimStatement = preparedStatement<[number, number]>(
  'starts.claim',
  `WITH RECURSIVE tenants (tenant_id) AS (
       (SELECT d.tenant_id FROM delivery_jobs d WHERE ${DUE} ORDER BY d.tenant_id LIMIT 1)
       UNION ALL
       SELECT (SELECT d.tenant_id FROM delivery_jobs d
                WHERE ${DUE} AND d.tenant_id > t.tenant_id ORDER BY d.tenant_id LIMIT 1)
         FROM tenants t WHERE t.tenant_id IS NOT NULL),
     ranked AS (
       SELECT x.id, x.seq, x.rn FROM tenants t CROSS JOIN LATERAL (
         SELECT d.id, d.seq, row_number() OVER (ORDER BY d.tenant_id, d.seq) AS rn FROM delivery_jobs d
          WHERE d.tenant_id >= t.tenant_id AND d.tenant_id <= t.tenant_id AND ${DUE} AND ${FREE}
          ORDER BY d.tenant_id, d.seq LIMIT $1) x
        WHERE t.tenant_id IS NOT NULL
        ORDER BY x.rn, x.seq LIMIT 2 * $1),
     picked AS (
       SELECT d.id, r.rn FROM delivery_jobs d JOIN ranked r ON r.id = d.id
        WHERE ${DUE} AND ${FREE}
        ORDER BY r.rn, r.seq LIMIT $1 FOR UPDATE OF d SKIP LOCKED)
   UPDATE delivery_jobs j SET dispatch_lease = now() + make_interval(secs => $2::double precision / 1000)
     FROM push_configs c, picked p
    WHERE c.row_id = j.config_row_id AND j.id = p.id
   RETURNING j.id, j.seq, p.rn, j.tenant_id, j.task_id, j.config_id, j.request_id, j.traceparent, c.url,
             j.start_after IS NOT NULL AS had_turn`,
);

/** Marks jobs whose workflow has started: they leave the claim runs for good. */
export async function markStarted(db: Db, ids: string[]): Promise<void> {
  if (ids.length > 0) await db.query(markStatement([ids]));
}

const markStatement = preparedStatement<[string[]]>(
  'starts.mark',
  'UPDATE delivery_jobs SET dispatched_at = now(), dispatch_lease = NULL WHERE id = ANY($1::uuid[]) AND dispatched_at IS NULL',
);

/** The jobs' starts failed: the next claim run takes them at once rather than after the lease. */
export async function releaseLeases(db: Db, ids: string[]): Promise<void> {
  if (ids.length > 0)
    await db.query(
      'UPDATE delivery_jobs SET dispatch_lease = NULL WHERE id = ANY($1::uuid[]) AND dispatched_at IS NULL',
      [ids],
    );
}

/**
 * First contacts' turns, kept in Postgres so that the rate holds across processes: with the tenants'
 * rows locked (in tenant order), `decide` gets their theoretical arrival times and the database's
 * clock (epoch ms) and answers the new ones and the jobs' turns, written in the same transaction (a
 * job's lease is dropped with its turn: a claim run takes it at its turn). Answers what `decide` did,
 * and the database's clock.
 */
export async function takeTurns<
  T extends { tat: Map<string, number>; later: Array<{ id: string; turn: number }> },
>(
  db: Db,
  tenants: string[],
  decide: (tat: Map<string, number>, nowMs: number) => T,
): Promise<{ result: T; nowMs: number }> {
  return inTx(db, async (tx) => {
    await tx.query(
      'INSERT INTO start_turns (tenant_id, tat) SELECT unnest($1::text[]), now() ON CONFLICT (tenant_id) DO NOTHING',
      [tenants],
    );
    const r = await tx.query<{ tenant_id: string; tat_ms: number; now_ms: number }>(
      `SELECT tenant_id, extract(epoch FROM tat) * 1000 AS tat_ms, extract(epoch FROM now()) * 1000 AS now_ms
         FROM start_turns WHERE tenant_id = ANY($1::text[]) ORDER BY tenant_id FOR UPDATE`,
      [tenants],
    );
    const nowMs = Number(r.rows[0]!.now_ms);
    const result = decide(new Map(r.rows.map((x) => [x.tenant_id, Number(x.tat_ms)])), nowMs);
    if (result.tat.size > 0)
      await tx.query(
        `UPDATE start_turns s SET tat = to_timestamp(x.tat / 1000)
           FROM unnest($1::text[], $2::double precision[]) AS x (tenant_id, tat) WHERE s.tenant_id = x.tenant_id`,
        [[...result.tat.keys()], [...result.tat.values()]],
      );
    if (result.later.length > 0)
      await tx.query(
        `UPDATE delivery_jobs j SET start_after = to_timestamp(x.turn / 1000), dispatch_lease = NULL
           FROM unnest($1::uuid[], $2::double precision[]) AS x (id, turn)
          WHERE j.id = x.id AND j.dispatched_at IS NULL`,
        [result.later.map((l) => l.id), result.later.map((l) => l.turn)],
      );
    return { result, nowMs };
  });
}

/** First contacts waiting for their turn (`start_after`), with their target's URL: at most `limit`. */
export async function waitingForTurn(db: Db, limit: number): Promise<Array<{ id: string; url: string }>> {
  const r = await db.query<{ id: string; url: string }>(
    `SELECT d.id, c.url FROM delivery_jobs d JOIN push_configs c ON c.row_id = d.config_row_id
      WHERE ${DUE} AND d.start_after > now() LIMIT $1`,
    [limit],
  );
  return r.rows;
}

/**
 * Their turns dropped (their target answered: first contacts no more); a claim run takes them at once.
 * Rows another statement holds are skipped, locked in id order.
 */
export async function dropTurns(db: Db, ids: string[]): Promise<void> {
  if (ids.length > 0)
    await db.query(
      `UPDATE delivery_jobs SET start_after = NULL
        WHERE id IN (SELECT id FROM delivery_jobs
                      WHERE id = ANY($1::uuid[]) AND dispatched_at IS NULL AND start_after > now()
                      ORDER BY id FOR UPDATE SKIP LOCKED)`,
      [ids],
    );
}

/**
 * The sweep's repair of lines (outbox_line_repair): jobs superseded while on the wire whose attempt is
 * older than `onWireMs` have ended, and every line whose head is not due gets it made due, leased for
 * `leaseMs` to the caller.
 */
export async function repairLines(db: Db, onWireMs: number, leaseMs: number): Promise<DueJob[]> {
  const r = await db.query<{ due: DueJob[] }>('SELECT outbox_line_repair($1, $2) AS due', [
    onWireMs,
    leaseMs,
  ]);
  return r.rows[0]!.due;
}

/**
 * Jobs past their deadline that nothing will run end `expired` (outbox_expire_waiting, on the
 * database's clock): those that wait for their line, and due ones still queued an hour past it. Config
 * health counts each; their lines advance. Answers the due jobs to wake of configs that stopped, the
 * config events written, and the jobs made due, leased for `leaseMs` to the caller.
 */
export async function expireWaiting(
  db: Db,
  rule: HealthRule,
  leaseMs: number,
): Promise<{ woken: string[]; events: string[]; due: DueJob[] }> {
  const r = await db.query<{ o_woken: string[]; o_events: string[]; o_due: DueJob[] }>(
    'SELECT o_woken, o_events, o_due FROM outbox_expire_waiting($1, $2, $3)',
    [rule.failingAfterMs, rule.warnAfterMs, leaseMs],
  );
  return { woken: r.rows[0]!.o_woken, events: r.rows[0]!.o_events, due: r.rows[0]!.o_due };
}

/** Due jobs whose workflow has not started (the relays' lag): a2a_push_outbox_queued. */
export async function queuedCount(db: Db): Promise<number> {
  const r = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM delivery_jobs d WHERE ${DUE} AND (d.start_after IS NULL OR d.start_after <= now())`,
  );
  return Number(r.rows[0]!.n);
}

/**
 * Jobs held back on purpose: not due (their line holds them), or first contacts waiting for their turn:
 * a2a_push_outbox_held.
 */
export async function heldCount(db: Db): Promise<number> {
  const r = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM delivery_jobs d
      WHERE d.status = 'queued' AND d.dispatched_at IS NULL AND (d.held_by IS NOT NULL OR d.start_after > now())`,
  );
  return Number(r.rows[0]!.n);
}
