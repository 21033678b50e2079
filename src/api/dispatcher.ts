import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import { DEFAULT_DELIVERY_WORKFLOW } from '../config';
import { preparedStatement, type Db } from '../db/pool';
import { jobsToStart, markDispatched, type WrittenEvent } from '../db/outbox';
import { hostAndTarget } from '../db/slots';
import type { KnownTargets } from './known-targets';
import { StartRate } from './start-rate';
import { withRequestContext } from '../request-context';
import { workflowStarts } from '../metrics';
import { inSpan } from '../tracing';
import {
  BEHIND_START_DELAY_MS,
  signalRegistration,
  startDeliveryWorkflow,
  wakeOrStartDeliveries,
  type DeliveryStarter,
  type DeliveryWorkflowKind,
  type EagerBudget,
  type JobToStart,
} from '../temporal';

export interface DispatcherOptions {
  db: Db;
  client: Client;
  taskQueue: string;
  logger: Logger;
  sweepIntervalMs: number;
  concurrency?: number;
  batchSize?: number;
  /** How long a claim keeps other dispatchers off a job whose start is under way. */
  leaseMs?: number;
  /**
   * The lease of a directly started job: short, so that a start lost in a crash right after the
   * commit is claimed by the next sweep after it (a start slower than this may be sent twice, and
   * Temporal rejects the second).
   */
  directLeaseMs?: number;
  /**
   * How many of the `concurrency` direct starts one tenant may have in flight (default half): a
   * tenant's burst of writes leaves the rest to other tenants' writes, whose jobs then start at once
   * instead of waiting for a claim run behind the burst's batch.
   */
  directPerTenant?: number;
  /**
   * Which targets answered lately: a job to any other starts in the slow lane (src/api/known-targets.ts).
   * Without it every job starts in the fast lane, whose attempt sends first contacts on.
   */
  knownTargets?: KnownTargets;
  /**
   * SLOW_LANE_START_RATE: starts per second per tenant of jobs that go to the slow lane (with
   * `knownTargets`; bursts of twice that). A job past it waits in the outbox for its turn
   * (`start_after`, migration 018). Unset or 0: no bound.
   */
  slowStartRate?: number;
  /**
   * HELD_START_RATE: starts per second per tenant of jobs written behind an unfinished job of their
   * config (DELIVERY_ORDER=per_config; bursts of twice that). A job past it is not started until its
   * turn (`start_after`) or until the job ahead ends, whose wake starts it (src/temporal.ts,
   * wakeOrStartDeliveries), whichever comes first. Unset or 0: no bound (every held job starts at
   * once, in its start delay).
   */
  heldStartRate?: number;
  /** The attempt plan shown in each delivery workflow's static details. */
  plan?: string;
  /** DELIVERY_WORKFLOW: the workflow type every start (direct, claim, sweep, a `:retry`'s job) uses. */
  workflow?: DeliveryWorkflowKind;
  /**
   * Ask for eager starts (EAGER_START, where the api runs beside a worker): `client` must then be on that
   * worker's NativeConnection (src/temporal.ts, eagerStartClient).
   */
  eager?: boolean;
  /**
   * With `eager`: the eager starts in flight per tenant in this process, shared with the worker beside it
   * (EAGER_START_PER_TENANT; src/worker/eager-starts.ts). Past a tenant's places its starts go through
   * the task queue. Unset: every start asks to be eager.
   */
  eagerStarts?: EagerBudget;
}

/** How many held-back slow-lane jobs one dispatcher remembers to release early (`releaseKnown`). */
const SLOW_HELD_TRACKED = 100_000;

/**
 * Starts the workflows of committed jobs. Two paths:
 * - direct (`startNow`): an event write's own jobs, started as soon as the write commits, without
 *   another query first: the idle path, where latency counts. The write leased the jobs (see
 *   `directLease`), so no claim run starts them meanwhile. Used while fewer than `concurrency` direct
 *   starts are in flight, fewer than `directPerTenant` of them the writing tenant's, and the last one
 *   did not fail; otherwise the write only kicks the claim run.
 * - claim (`kick`, at held-back jobs' turns, when a lease a failed statement left runs out, 1 s after
 *   a failed run (doubling, at most SWEEP_INTERVAL), and every SWEEP_INTERVAL): claims committed,
 *   unleased jobs round robin by tenant, each tenant's in commit order, in batches, `concurrency`
 *   starts at a time. It carries load and picks up any start lost in a crash or refused by Temporal
 *   (a direct start's lease expires after `directLeaseMs`, or is released at once when the start
 *   fails). Started jobs whose mark failed are marked again 1 s later (`markLater`).
 */
export class Dispatcher {
  private running: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private directInFlight = 0;
  private readonly directByTenant = new Map<string, number>();
  private directFailed = false;
  private toMark: Array<Omit<JobToStart, 'plan'>> = [];
  private marking: Promise<void> | undefined;
  private readonly directRuns = new Set<Promise<void>>();
  private readonly slowStarts: StartRate | undefined;
  private readonly heldStarts: StartRate | undefined;
  /**
   * Slow-lane jobs this process held back for their turn, by id: their target (`host:port`) and turn
   * (epoch ms). Released to the next claim run once their target is known (`releaseKnown`); an id
   * whose turn is past is due, and forgotten. At most SLOW_HELD_TRACKED ids; past that (or after a
   * restart) a job simply waits for its turn.
   */
  private readonly slowHeld = new Map<string, { target: string; turn: number }>();
  private releaseCheckedAt = 0;
  /**
   * Turns (epoch ms) of jobs this process held back, or whose turns it failed to write (their lease's
   * end): a claim run is kicked when the next one comes.
   */
  private turns: number[] = [];
  private turnTimer: NodeJS.Timeout | undefined;
  private turnAt = Infinity;
  /** Retries of failed claim runs in a row (each waits twice the one before), and the one pending. */
  private failedRuns = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  /**
   * Started jobs whose mark (`dispatched_at`) failed: marked again 1 s later, the wait doubling while it
   * keeps failing (at most SWEEP_INTERVAL). Their lease keeps claim runs off them meanwhile; a claim run
   * that takes them after it anyway starts them at once (never held back for a turn) and finds them
   * started.
   */
  private readonly unmarked = new Set<string>();
  private failedMarks = 0;
  private markTimer: NodeJS.Timeout | undefined;
  private remarking: Promise<void> | undefined;
  readonly concurrency: number;
  readonly batchSize: number;
  readonly leaseMs: number;
  readonly directLeaseMs: number;
  readonly directPerTenant: number;

  constructor(private readonly o: DispatcherOptions) {
    this.concurrency = o.concurrency ?? 32;
    this.batchSize = o.batchSize ?? 256;
    this.leaseMs = o.leaseMs ?? 60_000;
    this.directLeaseMs = o.directLeaseMs ?? 5_000;
    this.directPerTenant = Math.max(1, o.directPerTenant ?? Math.floor(this.concurrency / 2));
    this.slowStarts = o.slowStartRate ? new StartRate(o.slowStartRate) : undefined;
    this.heldStarts = o.heldStartRate ? new StartRate(o.heldStartRate) : undefined;
  }

  start(): void {
    const tick = () => {
      this.kick();
      this.timer = setTimeout(tick, this.o.sweepIntervalMs);
      this.timer.unref();
    };
    tick();
  }

  /** Coalesced: a run in progress picks up what committed meanwhile. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          try {
            while ((await this.runOnce()) === this.batchSize && !this.stopped);
          } catch (err) {
            // Kicks that came meanwhile are covered by the retry.
            this.retryLater(err);
            break;
          }
          this.failedRuns = 0;
          if (this.retryTimer) clearTimeout(this.retryTimer);
          this.retryTimer = undefined;
          await this.startRegistrations().catch((err: unknown) =>
            this.o.logger.warn(
              { err: messageOf(err) },
              'reading registrations to start failed; the sweep retries',
            ),
          );
        } while (this.again && !this.stopped);
      } finally {
        this.running = undefined;
      }
    })();
  }

  /**
   * A failed claim run (a query error, the pool's connect timeout, Temporal away) runs again after 1 s,
   * the wait doubling while runs keep failing, at most SWEEP_INTERVAL: the turns or the write that kicked
   * it are spent, and its jobs may be due now. One retry is pending at a time, however many kicks fail.
   */
  private retryLater(err: unknown): void {
    if (this.stopped) return;
    if (this.retryTimer) {
      // Kicks failing while a retry is pending neither add a retry nor lengthen the next wait.
      this.o.logger.debug({ err: messageOf(err) }, 'dispatcher run failed; a retry is pending');
      return;
    }
    const retryMs = this.retryWait(this.failedRuns++);
    this.o.logger.warn({ err: messageOf(err), retryMs }, 'dispatcher run failed; retrying');
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.kick();
    }, retryMs);
    this.retryTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.turnTimer) clearTimeout(this.turnTimer);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.markTimer) clearTimeout(this.markTimer);
    await Promise.all([this.running, ...this.directRuns]);
    await this.marking;
    await this.remarking;
  }

  /** The wait before a retry after `failures` failed ones in a row: 1 s, doubling, at most SWEEP_INTERVAL. */
  private retryWait(failures: number): number {
    return Math.min(1_000 * 2 ** Math.min(failures, 16), this.o.sweepIntervalMs);
  }

  /** Started jobs whose mark failed are marked again later (`unmarked`). */
  private markLater(ids: string[], err: unknown): void {
    for (const id of ids) this.unmarked.add(id);
    if (this.stopped || this.markTimer || this.unmarked.size === 0) return;
    const retryMs = this.retryWait(this.failedMarks++);
    this.o.logger.warn(
      { err: messageOf(err), jobs: this.unmarked.size, retryMs },
      'marking started jobs dispatched failed; retrying',
    );
    this.markTimer = setTimeout(() => {
      this.markTimer = undefined;
      const batch = [...this.unmarked];
      this.remarking = markDispatched(this.o.db, batch).then(
        () => {
          for (const id of batch) this.unmarked.delete(id);
          this.failedMarks = 0;
        },
        (e: unknown) => this.markLater([], e),
      );
    }, retryMs);
    this.markTimer.unref();
  }

  /**
   * The lease an event write puts on its new jobs when they will be started directly, or undefined
   * when the claim run should take them (direct starts saturated or failing, or the tenant's share of
   * them taken).
   */
  directLease(tenantId: string): number | undefined {
    if (this.stopped || this.directFailed || this.directInFlight >= this.concurrency) return undefined;
    if ((this.directByTenant.get(tenantId) ?? 0) >= this.directPerTenant) return undefined;
    return this.directLeaseMs;
  }

  /** Starts a committed write's leased jobs now (see directLease); a failed start goes back to the claim run. */
  startNow(tenantId: string, taskId: string, jobs: WrittenEvent['starts'], traceparent?: string): void {
    this.directInFlight += jobs.length;
    this.directByTenant.set(tenantId, (this.directByTenant.get(tenantId) ?? 0) + jobs.length);
    const plan = this.slowJobs(jobs).then((slow) => ({
      slow,
      later: this.holdBack(
        this.directLeaseMs,
        jobs.filter((j) => slow.has(j.id)).map((j) => ({ id: j.id, tenantId, target: j.target })),
        jobs.filter((j) => j.behind).map((j) => ({ id: j.id, tenantId, behind: j.behind! })),
      ),
    }));
    for (const j of jobs) {
      const run = plan
        .then(async ({ slow, later }) => {
          // Past its tenant's rate: no start now; the claim run starts it at its turn (or, held, its wake).
          if (later.has(j.id)) return undefined;
          const job = {
            id: j.id,
            tenantId,
            taskId,
            configId: j.configId,
            host: j.host,
            ...(j.behind ? { behind: j.behind, ...(j.deadlineAt ? { deadlineAt: j.deadlineAt } : {}) } : {}),
            ...(slow.has(j.id) ? { lane: 'slow' as const } : {}),
          };
          await this.startJob(job, 'direct', traceparent);
          return job;
        })
        .then(
          (started) => {
            if (!started) return;
            this.directFailed = false;
            this.markDispatched(started);
          },
          async (err: unknown) => {
            // Temporal refused or is away: until a claim run succeeds, writes leave their jobs to it.
            this.directFailed = true;
            this.o.logger.warn(
              { err: messageOf(err), jobId: j.id },
              'direct start failed; the claim run retries',
            );
            await this.releaseLeases([j.id]).catch(() => this.kickAfterLease(this.directLeaseMs));
            this.kick();
          },
        )
        .finally(() => {
          this.directInFlight--;
          const left = this.directByTenant.get(tenantId)! - 1;
          if (left > 0) this.directByTenant.set(tenantId, left);
          else this.directByTenant.delete(tenantId);
          this.directRuns.delete(run);
        });
      this.directRuns.add(run);
    }
  }

  /**
   * Of these jobs (each list in start order), the ids past their tenant's rate: slow-lane jobs past
   * SLOW_LANE_START_RATE, held jobs (written behind an unfinished job of their config) past
   * HELD_START_RATE. Each gets its turn as `start_after` (one statement for all, not awaited), its lease
   * is dropped, and a claim run is kicked when the first turn comes. If the statement fails, the lease
   * (`leaseMs`: direct or claim) runs out and a claim run kicked then takes them, as any start lost. A
   * held job's turn is at most BEHIND_START_DELAY_MS off (the bound a started held job's delay has):
   * it is what repairs a wake lost to a crash, so it must not drift with a long schedule. Once the
   * turns are written, the held jobs whose job ahead has already ended are woken: that end may have
   * read its line before this write committed, and so not have woken them (as `wakeIfAheadEnded` for
   * started jobs).
   */
  private holdBack(
    leaseMs: number,
    slowJobs: Array<{ id: string; tenantId: string; target?: string | undefined }>,
    heldJobs: Array<{ id: string; tenantId: string; behind: string }> = [],
  ): Set<string> {
    const later = new Map<string, number>();
    const now = Date.now();
    const sent = performance.now();
    for (const [rate, jobs, latest] of [
      [this.slowStarts, slowJobs, Infinity],
      [this.heldStarts, heldJobs, now + BEHIND_START_DELAY_MS],
    ] as const) {
      if (!rate || jobs.length === 0) continue;
      const byTenant = new Map<string, string[]>();
      for (const j of jobs) {
        const ids = byTenant.get(j.tenantId);
        if (ids) ids.push(j.id);
        else byTenant.set(j.tenantId, [j.id]);
      }
      for (const [tenantId, ids] of byTenant) {
        const turns = rate.turns(tenantId, ids.length, now);
        ids.forEach((id, i) => {
          if (turns[i]! > now) later.set(id, Math.min(turns[i]!, latest));
        });
      }
    }
    if (later.size === 0) return new Set();
    // The turn as an offset from the database's clock, which the claim run compares it with.
    void this.o.db
      .query(setTurns([[...later.keys()], [...later.values()].map((t) => t - now)]))
      .then(
        async () => {
          // The database set each turn as its clock when the statement ran plus the wait: up to the
          // time the statement took later than `now` here (under load, 100 ms and more; a turn kicked
          // at `now` + the wait then found its job not yet due, and the last one of a burst waited
          // for the sweep). From the answer's time, the kick never comes before the job is due.
          // (Measured on the monotonic clock: a wall clock stepped back must not shorten it.)
          const late = performance.now() - sent;
          for (const t of later.values()) this.turns.push(t + late);
          this.armTurns();
          for (const j of slowJobs)
            if (later.has(j.id) && j.target && this.slowHeld.size < SLOW_HELD_TRACKED)
              this.slowHeld.set(j.id, { target: j.target, turn: later.get(j.id)! + late });
          const ended = await this.aheadEnded(heldJobs.filter((j) => later.has(j.id)));
          if (ended.size > 0) await this.wake([...ended]);
        },
        (err: unknown) => {
          // The jobs keep the lease they were started or claimed under, and no turn.
          this.kickAfterLease(leaseMs);
          this.o.logger.warn({ err: messageOf(err) }, 'holding starts back until their turn failed');
        },
      )
      .catch((err: unknown) =>
        this.o.logger.warn({ err: messageOf(err) }, 'checking the lines of held-back jobs failed'),
      );
    return new Set(later.keys());
  }

  /**
   * Slow-lane jobs held back for their turn (SLOW_LANE_START_RATE) whose target has become known since
   * (a 2xx, and not suspect: the first contact answered): they are no longer first contacts, so their
   * turns are dropped and this claim run starts them, in the fast lane, rather than at turns up to
   * `held ÷ SLOW_LANE_START_RATE` seconds off. Checked before a claim run at most every 250 ms while
   * any are held (one indexed read of their targets, past the known-targets cache, so a target gone
   * suspect since is not taken for known). Ids whose turn is past are forgotten first: due, they are
   * some claim run's (this process's or another's), or a wake started them. Best effort: a failed read
   * or write releases nothing and never holds the claim run up; rows being changed meanwhile are skipped.
   */
  private async releaseKnown(): Promise<void> {
    if (this.slowHeld.size === 0 || !this.o.knownTargets) return;
    const now = Date.now();
    if (now - this.releaseCheckedAt < 250) return;
    this.releaseCheckedAt = now;
    const targets = new Set<string>();
    for (const [id, { target, turn }] of this.slowHeld)
      if (turn < now - 1_000) this.slowHeld.delete(id);
      else targets.add(target);
    if (targets.size === 0) return;
    try {
      const unknown = await this.o.knownTargets.unknownOf([...targets], { cached: false });
      if (!unknown) return;
      const ids = [...this.slowHeld].filter(([, h]) => !unknown.has(h.target)).map(([id]) => id);
      if (ids.length === 0) return;
      // Locked in id order, skipping rows another statement holds (a claim, a mark): no deadlock.
      await this.o.db.query(
        `UPDATE delivery_jobs SET start_after = NULL
          WHERE id IN (SELECT id FROM delivery_jobs
                        WHERE id = ANY($1::uuid[]) AND dispatched_at IS NULL AND start_after > now()
                        ORDER BY id FOR UPDATE SKIP LOCKED)`,
        [ids],
      );
      for (const id of ids) this.slowHeld.delete(id);
    } catch (err) {
      this.o.logger.warn(
        { err: messageOf(err) },
        'releasing held first contacts failed; they keep their turns',
      );
    }
  }

  /**
   * Jobs whose lease could not be dropped (a failed statement) are no claim run's until it runs out: a
   * claim run is kicked then, rather than left to the sweep.
   */
  private kickAfterLease(leaseMs: number): void {
    this.turns.push(Date.now() + leaseMs);
    this.armTurns();
  }

  /** Kicks a claim run when the next of `turns` comes (at most every 100 ms). */
  private armTurns(): void {
    if (this.stopped || this.turns.length === 0) return;
    const next = this.turns.reduce((a, b) => Math.min(a, b), Infinity);
    if (this.turnTimer && this.turnAt <= next) return;
    if (this.turnTimer) clearTimeout(this.turnTimer);
    // A little after the turn: the claim run compares it with the database's clock.
    this.turnAt = Math.max(next + 25, Date.now() + 100);
    this.turnTimer = setTimeout(() => {
      this.turnTimer = undefined;
      const now = Date.now();
      this.turns = this.turns.filter((t) => t + 25 > now);
      this.kick();
      this.armTurns();
    }, this.turnAt - Date.now());
    this.turnTimer.unref();
  }

  /**
   * The ids of these jobs whose first attempt goes to the slow lane: their target is unknown or
   * suspect. Never a job `behind` another: it takes its lane from that one's outcome, not from a hint.
   */
  private async slowJobs(
    jobs: Array<{ id: string; target?: string | undefined; behind?: string | null | undefined }>,
  ): Promise<Set<string>> {
    const hinted = jobs.filter((j) => !j.behind && j.target !== undefined);
    if (!this.o.knownTargets || hinted.length === 0) return new Set();
    const slow = await this.o.knownTargets.slow(hinted.map((j) => j.target!));
    return new Set(hinted.filter((j) => slow.has(j.target!)).map((j) => j.id));
  }

  /**
   * Starts one job's workflow, with the attempt plan in its details: both paths start through here,
   * in the trace of the request that wrote the job (its `traceparent`, kept on the row; src/tracing.ts).
   */
  private startJob(
    job: Omit<JobToStart, 'plan'>,
    path: 'direct' | 'claim',
    traceparent: string | null | undefined,
  ): Promise<void> {
    return inSpan(
      'dispatch',
      {
        parent: traceparent ?? null,
        attributes: { 'a2a_push.dispatch.path': path, 'a2a_push.job_id': job.id },
      },
      async () => {
        const eager = await startDeliveryWorkflow(
          this.o.client,
          this.o.taskQueue,
          { ...job, ...(this.o.plan ? { plan: this.o.plan } : {}) },
          this.o.workflow ?? DEFAULT_DELIVERY_WORKFLOW,
          this.o.eager ?? false,
          this.o.eagerStarts,
        );
        workflowStarts.inc({ path, eager: String(eager) });
      },
    );
  }

  /** Marks directly started jobs dispatched, many per statement when they come together. */
  private markDispatched(job: Omit<JobToStart, 'plan'>): void {
    this.toMark.push(job);
    if (this.marking) return;
    this.marking = (async () => {
      while (this.toMark.length > 0) {
        const batch = this.toMark.splice(0);
        await markDispatched(
          this.o.db,
          batch.map((b) => b.id),
        ).catch((err: unknown) =>
          // Not marked: their workflows run; marked again later.
          this.markLater(
            batch.map((b) => b.id),
            err,
          ),
        );
        await this.wakeIfAheadEnded(batch);
      }
      this.marking = undefined;
    })();
  }

  /**
   * Jobs started `behind` an earlier job of their config wait in their start delay for that one's end
   * to wake them. One that ended between the write and the start may have missed this job (its read of
   * the line came too early): read once more now that the starts are done, and wake those whose job
   * ahead has ended. (An end after the write's commit sees the job, and its wake starts the workflow
   * if the start has not come yet.) Best effort: a wake lost anyway is repaired by the end of the
   * start delay.
   */
  private async wakeIfAheadEnded(started: Array<Omit<JobToStart, 'plan'>>): Promise<void> {
    const held = started.filter((j): j is typeof j & { behind: string } => !!j.behind);
    if (held.length === 0) return;
    try {
      const ended = await this.aheadEnded(held);
      if (ended.size > 0)
        await wakeOrStartDeliveries(
          this.starter,
          held.filter((j) => ended.has(j.id)),
        );
    } catch (err) {
      this.o.logger.warn({ err: messageOf(err) }, 'checking the lines of started jobs failed');
    }
  }

  /** Of these held jobs, the ids whose job ahead has ended. */
  private async aheadEnded(held: Array<{ id: string; behind: string }>): Promise<Set<string>> {
    if (held.length === 0) return new Set();
    const r = await this.o.db.query<{ id: string }>(
      readAheadEnded([held.map((j) => j.id), held.map((j) => j.behind)]),
    );
    return new Set(r.rows.map((x) => x.id));
  }

  /** Where this dispatcher starts delivery workflows, and as what (its wakes start them the same way). */
  private get starter(): DeliveryStarter {
    return {
      client: this.o.client,
      taskQueue: this.o.taskQueue,
      kind: this.o.workflow ?? DEFAULT_DELIVERY_WORKFLOW,
      plan: this.o.plan,
    };
  }

  /**
   * Wakes jobs whose workflow may wait in its start delay (held behind an earlier job of its config)
   * or on a timer: superseded, their config deleted, or a head asked for an early attempt. Loads what
   * a start needs (a wake starts a job whose workflow has not started yet); best effort, as every wake.
   */
  async wake(jobIds: string[]): Promise<void> {
    if (jobIds.length === 0) return;
    for (const id of jobIds) this.slowHeld.delete(id);
    try {
      await markDispatched(
        this.o.db,
        await wakeOrStartDeliveries(this.starter, await jobsToStart(this.o.db, jobIds)),
      );
    } catch (err) {
      this.o.logger.warn({ err: messageOf(err) }, 'waking deliveries failed; their timers repair it');
    }
  }

  /** The jobs' starts failed: the next claim run takes them at once rather than after the lease. */
  private releaseLeases(ids: string[]) {
    return this.o.db.query(
      'UPDATE delivery_jobs SET dispatch_lease = NULL WHERE id = ANY($1::uuid[]) AND dispatched_at IS NULL',
      [ids],
    );
  }

  /**
   * Starts the registrations whose workflow start was lost (Temporal away at creation, or a crash).
   * Returns how many it started.
   */
  async startRegistrations(): Promise<number> {
    const r = await this.o.db.query<{
      id: string;
      tenant_id: string;
      agent_url: string;
      remote_task_id: string | null;
    }>(
      `SELECT id, tenant_id, agent_url, remote_task_id FROM registrations
        WHERE NOT workflow_started AND status IN ('pending', 'active') AND created_at < now() - interval '2 seconds'
        ORDER BY created_at LIMIT 100`,
    );
    // Each on its own: one that fails does not hold the others back; three failing in a row (Temporal
    // away, most likely) end the pass rather than wait out every call's timeout. The failed and the
    // untried wait for the sweep.
    let started = 0;
    let failed = 0;
    let inRow = 0;
    let error: unknown;
    for (const reg of r.rows) {
      if (inRow >= 3) break;
      try {
        // A registration whose remote task id was posted while Temporal was away needs that signal: a
        // run waiting for the id wakes only on it (and it is harmless to a run that has the id).
        await signalRegistration(
          this.o.client,
          this.o.taskQueue,
          reg,
          reg.remote_task_id ? 'remoteTask' : 'callback',
        );
        await this.o.db.query('UPDATE registrations SET workflow_started = true WHERE id = $1', [reg.id]);
        started++;
        inRow = 0;
      } catch (err) {
        failed++;
        inRow++;
        error ??= err;
      }
    }
    if (failed > 0)
      this.o.logger.warn(
        { err: messageOf(error), failed },
        'starting registration workflows failed; the sweep retries',
      );
    return started;
  }

  /** Claims one batch, starts its workflows, and marks the started ones. Returns how many were claimed. */
  async runOnce(): Promise<number> {
    await this.releaseKnown();
    // Round robin by tenant: every tenant's oldest job, then every tenant's second, ... (ties in
    // commit order), so one tenant's backlog does not hold the others' jobs behind it. `tenants`
    // walks the distinct tenants with undispatched jobs on the (tenant_id, seq) index, one probe
    // each; `ranked` reads each one's oldest $1 (the batch size) on the same index and keeps the
    // first 2 × $1 of them (room for rows a concurrent claim takes); `picked` locks the first $1,
    // re-checking the lease. The range on tenant_id, rather than `=`, keeps the planner on that
    // index: with `=` it read a small tenant's jobs along `seq`, filtering out a big tenant's
    // 100,000. EXPLAIN ANALYZE, batch 256 (docs/decisions.md): 8-14 ms with 100,000 undispatched
    // jobs of one tenant and 10 of another (the commit-order claim: 8-12 ms); 240-260 ms with
    // 1,002 tenants of 300 each (15 ms): it reads up to $1 jobs of every tenant with a backlog.
    const claimed = await this.o.db.query<{
      id: string;
      seq: string;
      rn: string;
      tenant_id: string;
      task_id: string;
      config_id: string;
      request_id: string | null;
      traceparent: string | null;
      url: string;
      behind: string | null;
      deadline_ms: string;
      had_turn: boolean;
    }>(
      `WITH RECURSIVE tenants (tenant_id) AS (
           (SELECT tenant_id FROM delivery_jobs WHERE dispatched_at IS NULL ORDER BY tenant_id LIMIT 1)
           UNION ALL
           SELECT (SELECT d.tenant_id FROM delivery_jobs d
                    WHERE d.dispatched_at IS NULL AND d.tenant_id > t.tenant_id ORDER BY d.tenant_id LIMIT 1)
             FROM tenants t WHERE t.tenant_id IS NOT NULL),
         ranked AS (
           SELECT x.id, x.seq, x.rn FROM tenants t CROSS JOIN LATERAL (
             SELECT d.id, d.seq, row_number() OVER (ORDER BY d.tenant_id, d.seq) AS rn FROM delivery_jobs d
              WHERE d.tenant_id >= t.tenant_id AND d.tenant_id <= t.tenant_id AND d.dispatched_at IS NULL
                AND (d.dispatch_lease IS NULL OR d.dispatch_lease < now())
                AND (d.start_after IS NULL OR d.start_after <= now())
              ORDER BY d.tenant_id, d.seq LIMIT $1) x
            WHERE t.tenant_id IS NOT NULL
            ORDER BY x.rn, x.seq LIMIT 2 * $1),
         picked AS (
           SELECT d.id, r.rn FROM delivery_jobs d JOIN ranked r ON r.id = d.id
            WHERE d.dispatched_at IS NULL AND (d.dispatch_lease IS NULL OR d.dispatch_lease < now())
              AND (d.start_after IS NULL OR d.start_after <= now())
            ORDER BY r.rn, r.seq LIMIT $1 FOR UPDATE OF d SKIP LOCKED)
       UPDATE delivery_jobs j SET dispatch_lease = now() + make_interval(secs => $2::double precision / 1000)
         FROM push_configs c, picked p
        WHERE c.row_id = j.config_row_id AND j.id = p.id
       RETURNING j.id, j.seq, p.rn, j.tenant_id, j.task_id, j.config_id, j.request_id, j.traceparent, c.url,
                 (SELECT d.id FROM delivery_jobs d
                   WHERE j.ordered AND d.config_row_id = j.config_row_id AND d.seq < j.seq AND d.ordered
                     AND d.status IN ('queued', 'in_flight', 'waiting_retry')
                   ORDER BY d.seq DESC LIMIT 1) AS behind,
                 extract(epoch FROM j.deadline) * 1000 AS deadline_ms, j.start_after IS NOT NULL AS had_turn`,
      [this.batchSize, this.leaseMs],
    );
    // Started in that order (the lanes take jobs in claimed order).
    const jobs = claimed.rows.sort((a, b) => Number(a.rn) - Number(b.rn) || Number(a.seq) - Number(b.seq));
    for (const j of jobs) this.slowHeld.delete(j.id);
    if (jobs.length === 0) {
      this.directFailed = false;
      return 0;
    }
    const parts = new Map(jobs.map((j) => [j.id, hostAndTarget(j.url)]));
    const slow = await this.slowJobs(jobs.map((j) => ({ id: j.id, ...parts.get(j.id)!, behind: j.behind })));
    // Slow-lane and held jobs past their tenant's rate wait for their turn; one held back before starts now.
    const later = this.holdBack(
      this.leaseMs,
      // (Not a started job whose mark failed: its start takes no turn.)
      jobs
        .filter((j) => slow.has(j.id) && !j.had_turn && !this.unmarked.has(j.id))
        .map((j) => ({ id: j.id, tenantId: j.tenant_id, target: parts.get(j.id)!.target })),
      jobs
        .filter((j) => j.behind && !j.had_turn && !this.unmarked.has(j.id))
        .map((j) => ({ id: j.id, tenantId: j.tenant_id, behind: j.behind! })),
    );
    const toStart = jobs.filter((j) => !later.has(j.id));
    const started: Array<Omit<JobToStart, 'plan'>> = [];
    let next = 0;
    let failure: unknown;
    const lane = async () => {
      while (next < toStart.length && failure === undefined) {
        const j = toStart[next++]!;
        const job = {
          id: j.id,
          tenantId: j.tenant_id,
          taskId: j.task_id,
          configId: j.config_id,
          host: parts.get(j.id)!.host,
          ...(j.behind ? { behind: j.behind, deadlineAt: Math.ceil(Number(j.deadline_ms)) } : {}),
          ...(slow.has(j.id) ? { lane: 'slow' as const } : {}),
        };
        try {
          // The start carries the id of the request that wrote the job.
          await withRequestContext({ requestId: j.request_id ?? '' }, () =>
            this.startJob(job, 'claim', j.traceparent),
          );
          started.push(job);
        } catch (err) {
          failure = err;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.concurrency, toStart.length) }, lane));
    const startedSet = new Set(started.map((j) => j.id));
    const notStarted = toStart.map((j) => j.id).filter((id) => !startedSet.has(id));
    // Not marked: their workflows run; marked again later. The jobs whose start failed are still
    // released below.
    await markDispatched(this.o.db, [...startedSet]).then(
      () => {
        if (this.unmarked.size > 0) for (const id of startedSet) this.unmarked.delete(id);
      },
      (err: unknown) => this.markLater([...startedSet], err),
    );
    await this.wakeIfAheadEnded(started);
    if (started.length > 0) this.directFailed = false;
    if (notStarted.length > 0) {
      await this.releaseLeases(notStarted).catch(() => this.kickAfterLease(this.leaseMs));
      throw failure;
    }
    return jobs.length;
  }
}

export async function queuedCount(db: Db): Promise<number> {
  const r = await db.query<{ n: string }>(
    // Not the jobs waiting for their turn (SLOW_LANE_START_RATE, HELD_START_RATE): held back on purpose.
    `SELECT count(*) AS n FROM delivery_jobs
      WHERE dispatched_at IS NULL AND (start_after IS NULL OR start_after <= now())`,
  );
  return Number(r.rows[0]!.n);
}

/**
 * Jobs held back on purpose: queued behind an earlier job of their config (DELIVERY_ORDER=per_config),
 * or not started until their turn (SLOW_LANE_START_RATE, HELD_START_RATE). Not dispatcher lag:
 * a2a_push_outbox_queued counts the other jobs whose workflow has not started.
 */
export async function heldCount(db: Db): Promise<number> {
  const r = await db.query<{ n: string }>(
    // A held job past HELD_START_RATE is both: counted once.
    `SELECT count(*) AS n FROM (
       SELECT id FROM delivery_jobs WHERE held_by IS NOT NULL AND status = 'queued'
        UNION
       SELECT id FROM delivery_jobs WHERE dispatched_at IS NULL AND start_after > now()) x`,
  );
  return Number(r.rows[0]!.n);
}

/** A held-back job's turn, as an offset from the database's clock (the claim run compares it with that). */
const setTurns = preparedStatement<[string[], number[]]>(
  'dispatch.turns',
  `UPDATE delivery_jobs j
      SET start_after = now() + make_interval(secs => x.wait / 1000), dispatch_lease = NULL
     FROM unnest($1::uuid[], $2::double precision[]) AS x (id, wait)
    WHERE j.id = x.id AND j.dispatched_at IS NULL`,
);

/** Of (held job, job ahead) pairs, the held jobs whose job ahead has ended. */
const readAheadEnded = preparedStatement<[string[], string[]]>(
  'dispatch.ahead_ended',
  `SELECT x.id FROM unnest($1::uuid[], $2::uuid[]) AS x (id, behind)
     JOIN delivery_jobs b ON b.id = x.behind
    WHERE b.status NOT IN ('queued', 'in_flight', 'waiting_retry')`,
);

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));
