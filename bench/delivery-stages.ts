/**
 * Where each delivery's time went, from the service's database and the workflows' histories:
 *
 *   write     event write sent → the job's row written (`created_at`: its transaction's start)
 *   ahead     → the job ahead in its config's line ended (`finished_at` of the previous ordered job of the
 *             config; 0 when it had ended before, or under DELIVERY_ORDER=none)
 *   to task   → the workflow task that ran the delivering attempt was scheduled (the start or the wake:
 *             the relay's start, a first contact's turn, Temporal's own path to a scheduled task; before
 *             the starts room also a start delay and a line's wake)
 *   queue     → that task started (matching: a poller of the worker took it; 0 for an eager start)
 *   worker    → the receiver read the POST (the worker ran the task: the attempt's statements, the POST);
 *             without the receiver's time: the attempt's start (workflow time) + its duration
 *
 * The stages add up to the event → POST time. Each delivery also says how its delivering task came
 * (`how`): `eager` (the first task handed back in an eager start's answer), `start` (a start through the
 * task queue), `start delay` (a delayed start whose delay ran out), `signal` (a wake: a signal-with-start
 * ending a start delay, or a signal to a run waiting on a timer), `timer` (a run's own timer fired), and
 * how many workflow tasks the run had before it.
 *
 * As a module: `deliveryStages()` (benchmark 11 calls it after its load). As a script, for a run kept
 * with BENCH_KEEP=1 or any live stack:
 *   ts-node --transpile-only bench/delivery-stages.ts <databaseUrl> <temporalAddress> <taskIdPrefix> [namespace]
 * (no receiver times there: `worker` ends at the attempt's start + its duration).
 */
import { Client, Connection } from '@temporalio/client';
import { Client as PgClient } from 'pg';
import { makeDeliveryWorkflowId } from '../src/ids';
import { percentile, pool, round } from './lib/util';

export const STAGES = ['write', 'ahead', 'to task', 'queue', 'worker'] as const;
export type Stage = (typeof STAGES)[number];

export interface DeliveryStage {
  jobId: string;
  /** The event's benchmark id (its body's `bench` mark). */
  eventId: string;
  taskId: string;
  configId: string;
  /** Epoch ms: the write sent (when known), the row written, the POST read (or its estimate). */
  sentAt: number;
  createdAt: number;
  seenAt: number;
  total: number;
  stages: Record<Stage, number>;
  how: 'eager' | 'start' | 'start delay' | 'signal' | 'timer' | 'other' | 'no history';
  /** Workflow tasks the run had before the delivering one. */
  tasksBefore: number;
  /** The start's delay (Temporal's firstWorkflowTaskBackoff), ms; 0 without one. */
  startDelayMs: number;
  /** The job's turn was set (a first contact's turn): it waited in the outbox. */
  hadTurn: boolean;
  /** Written behind an unfinished job of its config (its `ahead` is that one's end). */
  behind: boolean;
  /** The workflow's start, relative to `createdAt` (ms): the relay's (before: the dispatcher's or a wake's). */
  startedAfterMs: number;
  /** Workflow tasks that timed out (start-to-close: a lost task; schedule-to-start: the sticky queue). */
  taskTimeouts: number;
}

interface JobRow {
  id: string;
  event_id: string;
  task_id: string;
  config_id: string;
  created: number;
  ahead_finished: number | null;
  attempt_at: number | null;
  duration_ms: number | null;
  had_turn: boolean;
}

const ms = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) =>
  t ? Number(t.seconds) * 1000 + Math.round((t.nanos ?? 0) / 1e6) : NaN;

/**
 * Every delivered job whose task id starts with `taskPrefix`, broken into stages. `sentAt`: when each
 * event's write was sent (by event id; else its row's `created_at` stands in); `seenAt`: when the
 * receiver read each job's POST (by job id; else the attempt's start + its duration).
 */
export async function deliveryStages(o: {
  databaseUrl: string;
  temporalAddress: string;
  namespace?: string;
  taskPrefix: string;
  sentAt?: ReadonlyMap<string, number>;
  seenAt?: ReadonlyMap<string, number>;
  concurrency?: number;
}): Promise<DeliveryStage[]> {
  const pg = new PgClient({ connectionString: o.databaseUrl });
  await pg.connect();
  let rows: JobRow[];
  try {
    const r = await pg.query<JobRow>(
      `SELECT j.id, substring(e.body FROM '"bench":"([^"]+)"') AS event_id, j.task_id, j.config_id,
              extract(epoch FROM j.created_at) * 1000 AS created,
              CASE WHEN j.ordered THEN
                (SELECT extract(epoch FROM p.finished_at) * 1000 FROM delivery_jobs p
                  WHERE p.config_row_id = j.config_row_id AND p.seq < j.seq AND p.ordered
                  ORDER BY p.seq DESC LIMIT 1) END AS ahead_finished,
              extract(epoch FROM a.started_at) * 1000 AS attempt_at, a.duration_ms,
              j.start_after IS NOT NULL AS had_turn
         FROM delivery_jobs j JOIN task_events e ON e.id = j.event_id
         JOIN delivery_attempts a ON a.job_id = j.id AND a.outcome = 'delivered'
        WHERE j.task_id LIKE $1`,
      [`${o.taskPrefix}%`],
    );
    rows = r.rows.map((x) => ({
      ...x,
      created: Number(x.created),
      ahead_finished: x.ahead_finished === null ? null : Number(x.ahead_finished),
      attempt_at: x.attempt_at === null ? null : Number(x.attempt_at),
    }));
  } finally {
    await pg.end();
  }
  const connection = await Connection.connect({ address: o.temporalAddress });
  const out: DeliveryStage[] = [];
  try {
    const client = new Client({ connection, namespace: o.namespace ?? 'default' });
    await pool(rows, o.concurrency ?? 8, async (j) => {
      const sentAt = o.sentAt?.get(j.event_id) ?? j.created;
      const seenAt = o.seenAt?.get(j.id) ?? (j.attempt_at ?? NaN) + (j.duration_ms ?? 0);
      const aheadEnd =
        j.ahead_finished !== null && j.ahead_finished > j.created ? j.ahead_finished : j.created;
      let events: Awaited<ReturnType<ReturnType<Client['workflow']['getHandle']>['fetchHistory']>>['events'];
      try {
        events = (await client.workflow.getHandle(makeDeliveryWorkflowId(j.id)).fetchHistory()).events ?? [];
      } catch {
        events = [];
      }
      const started = events[0]?.workflowExecutionStartedEventAttributes;
      const startDelayMs = started ? ms(started.firstWorkflowTaskBackoff) || 0 : 0;
      // The delivering task: the last workflow task started at or before the attempt's workflow time
      // (a workflow's clock is its task's start), and the task scheduled just before it.
      let at = -1;
      const tasksStarted: number[] = [];
      events.forEach((e, i) => {
        if (!e.workflowTaskStartedEventAttributes) return;
        tasksStarted.push(i);
        if (j.attempt_at !== null && ms(e.eventTime) <= j.attempt_at + 1) at = i;
      });
      let sched = -1;
      for (let i = at; i >= 0; i--)
        if (events[i]!.workflowTaskScheduledEventAttributes) {
          sched = i;
          break;
        }
      const tStarted = at >= 0 ? ms(events[at]!.eventTime) : NaN;
      const tSched = sched >= 0 ? ms(events[sched]!.eventTime) : NaN;
      let how: DeliveryStage['how'] = 'no history';
      if (sched >= 0) {
        const before = events[sched - 1];
        const first = tasksStarted[0] === at;
        if (first && started?.eagerExecutionAccepted) how = 'eager';
        else if (before?.workflowExecutionSignaledEventAttributes) how = 'signal';
        else if (before?.timerFiredEventAttributes) how = 'timer';
        else if (first && startDelayMs > 0) how = 'start delay';
        else if (first) how = 'start';
        else how = 'other';
      }
      const stages: Record<Stage, number> = {
        write: j.created - sentAt,
        ahead: aheadEnd - j.created,
        'to task': Number.isFinite(tSched) ? tSched - aheadEnd : NaN,
        queue: Number.isFinite(tStarted) ? tStarted - tSched : NaN,
        worker: Number.isFinite(tStarted) ? seenAt - tStarted : NaN,
      };
      out.push({
        jobId: j.id,
        eventId: j.event_id,
        taskId: j.task_id,
        configId: j.config_id,
        sentAt,
        createdAt: j.created,
        seenAt,
        total: seenAt - sentAt,
        stages,
        how,
        tasksBefore: Math.max(0, tasksStarted.indexOf(at)),
        startDelayMs,
        hadTurn: j.had_turn,
        behind: j.ahead_finished !== null && j.ahead_finished > j.created,
        startedAfterMs: events[0] ? ms(events[0].eventTime) - j.created : NaN,
        taskTimeouts: events.filter((e) => e.workflowTaskTimedOutEventAttributes).length,
      });
    });
  } finally {
    await connection.close();
  }
  return out.sort((a, b) => a.sentAt - b.sentAt || a.jobId.localeCompare(b.jobId));
}

/** p50 of each stage (ms) and how many deliveries came each way, over a list of deliveries. */
export function stageSummary(ds: readonly DeliveryStage[]): {
  n: number;
  total: { p50: number; p99: number };
  p50: Record<Stage, number>;
  mean: Record<Stage, number>;
  how: Record<string, number>;
  behind: number;
  hadTurn: number;
  taskTimeouts: number;
} {
  const p50 = {} as Record<Stage, number>;
  const mean = {} as Record<Stage, number>;
  for (const s of STAGES) {
    const v = ds.map((d) => d.stages[s]).filter(Number.isFinite);
    p50[s] = round(percentile(v, 50));
    mean[s] = v.length > 0 ? round(v.reduce((a, b) => a + b, 0) / v.length) : NaN;
  }
  const how: Record<string, number> = {};
  for (const d of ds) how[d.how] = (how[d.how] ?? 0) + 1;
  const totals = ds.map((d) => d.total).filter(Number.isFinite);
  return {
    n: ds.length,
    total: { p50: round(percentile(totals, 50)), p99: round(percentile(totals, 99)) },
    p50,
    mean,
    how,
    behind: ds.filter((d) => d.behind).length,
    hadTurn: ds.filter((d) => d.hadTurn).length,
    taskTimeouts: ds.reduce((a, d) => a + d.taskTimeouts, 0),
  };
}

/** One line per summary: "n 900, total p50 …; mean ms: write …, ahead …; how: eager …". */
export function stageLine(label: string, ds: readonly DeliveryStage[]): string {
  if (ds.length === 0) return `${label}: no deliveries`;
  const s = stageSummary(ds);
  return (
    `${label}: ${s.n} deliveries, event → POST p50 ${s.total.p50} / p99 ${s.total.p99} ms; ` +
    `mean ms ${STAGES.map((k) => `${k} ${s.mean[k]}`).join(', ')}; ` +
    `p50 ms ${STAGES.map((k) => `${k} ${s.p50[k]}`).join(', ')}; ` +
    `task came by ${Object.entries(s.how)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}; written behind an unfinished job ${s.behind}, waited for a turn ${s.hadTurn}, ` +
    `workflow task timeouts ${s.taskTimeouts}`
  );
}

if (require.main === module) {
  const [databaseUrl, temporalAddress, taskPrefix, namespace] = process.argv.slice(2);
  if (!databaseUrl || !temporalAddress || !taskPrefix) {
    console.error('usage: delivery-stages.ts <databaseUrl> <temporalAddress> <taskIdPrefix> [namespace]');
    process.exit(2);
  }
  deliveryStages({ databaseUrl, temporalAddress, taskPrefix, ...(namespace ? { namespace } : {}) })
    .then((ds) => {
      const first = Math.min(...ds.map((d) => d.sentAt));
      const byMinute = new Map<number, DeliveryStage[]>();
      for (const d of ds) {
        const m = Math.floor((d.sentAt - first) / 60_000);
        byMinute.set(m, [...(byMinute.get(m) ?? []), d]);
      }
      console.log(stageLine('all', ds));
      for (const [m, list] of [...byMinute].sort((a, b) => a[0] - b[0]))
        console.log(stageLine(`minute ${m + 1}`, list));
    })
    .catch((err: unknown) => {
      console.error(err);
      process.exit(1);
    });
}
