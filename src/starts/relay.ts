import type { Logger } from 'pino';
import { DEFAULT_SLOT_SETTINGS, hostAndTarget } from '../db/slots';
import type { Runtime } from '../runtime';
import type { Db } from '../db/pool';
import type { PgListener } from '../db/listen';
import type { HealthRule } from '../delivery/health';
import type { DueHandoff, DueJob } from '../delivery/types';
import { configEvents, configsFailing, workflowStarts } from '../metrics';
import { withRequestContext } from '../request-context';
import { inSpan } from '../tracing';
import { admit, type Admission, type Candidate } from './admission';
import { startDelivery, wakeDeliveries, wakeLegacyRuns, type Starter } from './client';
import { KnownTargets } from './known-targets';
import {
  claimDue,
  dropTurns,
  expireWaiting,
  markStarted,
  releaseLeases,
  repairLines,
  takeTurns,
  waitingForTurn,
  type ClaimedJob,
} from './outbox';
import { startLostRegistrations } from './registrations';

/** The channel on which a statement that makes jobs due without leasing them announces them. */
export const DUE_CHANNEL = 'a2a_push_due';

/** Starts one relay has in flight at most; past them, new due jobs are left to the claim runs. */
export const STARTS_IN_FLIGHT = 32;
/**
 * Of those, one tenant's at most: a tenant's burst of writes leaves the rest to other tenants' writes,
 * whose jobs then start at once instead of waiting for a claim run behind the burst.
 */
export const STARTS_IN_FLIGHT_PER_TENANT = 16;
/**
 * The lease of a job made due for this process to start: short, so that a start lost in a crash right
 * after the commit is claimed by the next claim run after it (a start slower than this may be sent
 * twice, and Temporal refuses the second).
 */
export const DIRECT_LEASE_MS = 5_000;
/** How long a claim keeps other relays off a job whose start is under way. */
export const CLAIM_LEASE_MS = 60_000;
/** How often a claim run looks for first contacts whose target has answered since their turn was given. */
const RELEASE_CHECK_MS = 250;
/** Jobs one claim takes at most. */
export const CLAIM_BATCH = 256;
/**
 * An attempt without an outcome older than this is not on the wire any more: no attempt outlives its
 * activity's start-to-close timeout (2 min). The sweep ends a superseded job's line hold past it.
 */
export const ON_WIRE_LIMIT_MS = 3 * 60_000;

export interface RelayOptions {
  db: Db;
  starter: Starter;
  logger: Logger;
  /** SWEEP_INTERVAL: how often the sweep repairs lost starts and lines. */
  sweepIntervalMs: number;
  /** Which targets answered lately: a job to any other is a first contact (slow lane, rate). */
  known: KnownTargets;
  /** The process's LISTEN connection: a NOTIFY on DUE_CHANNEL kicks a claim run. */
  listener?: PgListener;
  /** CONFIG_FAILING_AFTER and CONFIG_WARN_AFTER: config health for the jobs the sweep expires. */
  health: HealthRule;
}

/** A process's relay, from its runtime's settings, starting on `starter`. */
export function relayOf(rt: Runtime, starter: Starter): Relay {
  return new Relay({
    db: rt.db,
    starter,
    logger: rt.logger,
    sweepIntervalMs: rt.settings.SWEEP_INTERVAL,
    known: new KnownTargets(rt.db, { knownMs: DEFAULT_SLOT_SETTINGS.knownMs }),
    listener: rt.listener,
    health: { failingAfterMs: rt.settings.CONFIG_FAILING_AFTER, warnAfterMs: rt.settings.CONFIG_WARN_AFTER },
  });
}

/**
 * Starts the workflows of due jobs: one per process, shared by its roles. Two ways in:
 * - `take`: jobs this process's own statement made due and leased to it (an event write, an attempt's
 *   end, the bound), started at once with no claim query: the idle path, where latency counts. Used
 *   while `leaseMs` gives a lease: fewer than STARTS_IN_FLIGHT starts in flight, fewer than
 *   STARTS_IN_FLIGHT_PER_TENANT of them the tenant's, and the last start did not fail.
 * - `kick`: a claim run (coalesced): takes due, unleased jobs round robin by tenant, in batches. Kicked
 *   by a NOTIFY (a statement of any process made jobs due without a lease), at the turn of a first
 *   contact it held back, 1 s after a failed run (doubling, at most SWEEP_INTERVAL), and by the sweep.
 * Which of them start now, and in which lane, is `admit`'s (src/starts/admission.ts); this does the I/O
 * around it. The sweep (every SWEEP_INTERVAL) also repairs lines and registrations whose start was lost.
 */
export class Relay implements DueHandoff {
  private inFlight = 0;
  private readonly byTenant = new Map<string, number>();
  private failing = false;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = false;
  private failedRuns = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;
  /** Turns of first contacts this relay held back (epoch ms, this process's clock): a claim run then. */
  private turns: number[] = [];
  private turnTimer: NodeJS.Timeout | undefined;
  private releasedAt = 0;
  private readonly work = new Set<Promise<unknown>>();

  constructor(private readonly o: RelayOptions) {}

  /** Starts the sweep and listens for due jobs. */
  async start(): Promise<void> {
    await this.o.listener?.on(DUE_CHANNEL, () => this.kick());
    // The next sweep is timed from the end of this one: a slow sweep never overlaps the next.
    const sweep = () => {
      this.track(
        this.sweep().finally(() => {
          if (this.stopped) return;
          this.sweepTimer = setTimeout(sweep, this.o.sweepIntervalMs);
          this.sweepTimer.unref();
        }),
      );
    };
    sweep();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of [this.sweepTimer, this.retryTimer, this.turnTimer]) if (t) clearTimeout(t);
    await this.running;
    await Promise.all([...this.work]);
  }

  leaseMs(tenantId: string): number | undefined {
    if (this.stopped || this.failing || this.inFlight >= STARTS_IN_FLIGHT) return undefined;
    if ((this.byTenant.get(tenantId) ?? 0) >= STARTS_IN_FLIGHT_PER_TENANT) return undefined;
    return DIRECT_LEASE_MS;
  }

  take(jobs: DueJob[]): void {
    if (jobs.length === 0) return;
    for (const j of jobs) this.count(j.tenantId, 1);
    this.track(
      this.admitAndStart(jobs, 'direct')
        .catch((err: unknown) => {
          this.o.logger.warn({ err: messageOf(err) }, 'starting due jobs failed; a claim run retries');
          this.kick();
        })
        .finally(() => {
          for (const j of jobs) this.count(j.tenantId, -1);
        }),
    );
  }

  /** Wakes running delivery workflows (superseded, their config deleted, an early attempt asked). */
  wake(jobIds: string[]): void {
    if (jobIds.length > 0) this.track(wakeDeliveries(this.o.starter.client, jobIds));
  }

  /** A claim run; coalesced: a run in progress picks up what became due meanwhile. */
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
            while ((await this.claimOnce()) === CLAIM_BATCH && !this.stopped);
          } catch (err) {
            // Kicks that came meanwhile are covered by the retry.
            this.retryLater(err);
            break;
          }
          this.failedRuns = 0;
          if (this.retryTimer) clearTimeout(this.retryTimer);
          this.retryTimer = undefined;
        } while (this.again && !this.stopped);
      } finally {
        this.running = undefined;
      }
    })();
  }

  /** One claim: takes a batch, admits and starts it. Answers how many it claimed; throws when starts failed. */
  private async claimOnce(): Promise<number> {
    await this.releaseAnswered();
    const jobs = await claimDue(this.o.db, CLAIM_BATCH, CLAIM_LEASE_MS);
    if (jobs.length > 0) await this.admitAndStart(jobs, 'claim');
    else this.failing = false;
    return jobs.length;
  }

  /**
   * Which of these fresh due jobs start now, in which lane, and which wait for their turn: first
   * contacts take turns from their tenant's rate (kept in the database), a claim run kicked for each.
   */
  private async admit(fresh: Array<DueJob | ClaimedJob>): Promise<Admission> {
    const targets = new Map(fresh.map((j) => [j.id, hostAndTarget(j.url).target]));
    const unknown = await this.o.known.slow([...targets.values()].filter((t): t is string => !!t));
    const candidates: Candidate[] = fresh.map((j, i) => ({
      id: j.id,
      tenantId: j.tenantId,
      seq: 'seq' in j ? j.seq : i,
      firstContact: unknown.has(targets.get(j.id) ?? ''),
      hadTurn: 'hadTurn' in j ? j.hadTurn : false,
    }));
    const charged = candidates.filter((c) => c.firstContact && !c.hadTurn);
    if (charged.length === 0) return admit(candidates, new Map(), Date.now());
    const { result, nowMs } = await takeTurns(
      this.o.db,
      [...new Set(charged.map((c) => c.tenantId))].sort(),
      (tat, now) => admit(candidates, tat, now),
    );
    // Turns are on the database's clock; the kick is timed on this process's.
    this.kickAt(result.later.map((l) => l.turn - nowMs + Date.now()));
    return result;
  }

  /**
   * Admits these due jobs (leased to this relay) and starts the admitted ones; first contacts past
   * their tenant's rate wait for their turn (a claim run is kicked then). Jobs whose workflow started
   * before they were due (the previous version's) are woken instead. Throws when a start failed, after
   * giving back the leases of the jobs not started.
   */
  private async admitAndStart(jobs: Array<DueJob | ClaimedJob>, path: 'direct' | 'claim'): Promise<void> {
    const legacy = jobs.filter((j) => j.dispatched);
    if (legacy.length > 0) await wakeLegacyRuns(this.o.starter, legacy);
    const fresh = jobs.filter((j) => !j.dispatched);
    if (fresh.length === 0) return;
    let admission: Admission;
    try {
      admission = await this.admit(fresh);
    } catch (err) {
      // Nothing started: the leases go back at once, for any claim run.
      await releaseLeases(
        this.o.db,
        fresh.map((j) => j.id),
      ).catch(() => this.kickAt([Date.now() + CLAIM_LEASE_MS]));
      throw err;
    }
    const byId = new Map(fresh.map((j) => [j.id, j]));
    const started: string[] = [];
    let failure: unknown;
    let next = 0;
    const worker = async () => {
      while (next < admission.start.length && failure === undefined) {
        const { id, lane } = admission.start[next++]!;
        const job = byId.get(id)!;
        try {
          await withRequestContext({ requestId: job.requestId ?? '' }, () =>
            inSpan(
              'dispatch',
              {
                parent: job.traceparent ?? null,
                attributes: { 'a2a_push.dispatch.path': path, 'a2a_push.job_id': id },
              },
              async () => {
                const how = await startDelivery(this.o.starter, job, lane);
                workflowStarts.inc({ path, lane, eager: String(how === 'eager') });
              },
            ),
          );
          started.push(id);
        } catch (err) {
          failure = err;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(STARTS_IN_FLIGHT, admission.start.length) }, worker));
    // Not marked: their workflows run; once the lease is out a claim run finds them started ('exists').
    await markStarted(this.o.db, started).catch((err: unknown) =>
      this.o.logger.warn({ err: messageOf(err) }, 'marking started jobs failed; their lease runs out'),
    );
    if (failure === undefined) {
      this.failing = false;
      return;
    }
    // Temporal refused or is away: until a start succeeds, statements leave their jobs to claim runs.
    this.failing = true;
    const done = new Set(started);
    await releaseLeases(
      this.o.db,
      admission.start.map((s) => s.id).filter((id) => !done.has(id)),
    ).catch(() => this.kickAt([Date.now() + CLAIM_LEASE_MS]));
    throw failure;
  }

  /**
   * First contacts waiting for their turn whose target has answered a 2xx since are first contacts no
   * more: their turns are dropped, and this claim run starts them in the fast lane, rather than at
   * turns up to (first contacts ÷ 10) seconds off (benchmark 1: 1,000 jobs to one new receiver). Read
   * at most every 250 ms, while this relay has turns ahead, past the known-targets cache (a target gone
   * suspect since is not taken for known). Best effort: a failed read releases nothing.
   */
  private async releaseAnswered(): Promise<void> {
    if (this.turns.length === 0 || Date.now() - this.releasedAt < RELEASE_CHECK_MS) return;
    this.releasedAt = Date.now();
    try {
      const waiting = await waitingForTurn(this.o.db, CLAIM_BATCH * 4);
      const targetOf = new Map(waiting.map((w) => [w.id, hostAndTarget(w.url).target]));
      const targets = [...new Set(targetOf.values())].filter((t): t is string => !!t);
      const unknown = await this.o.known.unknownOf(targets, { cached: false });
      if (!unknown) return;
      await dropTurns(
        this.o.db,
        waiting.filter((w) => targetOf.get(w.id) && !unknown.has(targetOf.get(w.id)!)).map((w) => w.id),
      );
    } catch (err) {
      this.o.logger.warn(
        { err: messageOf(err) },
        'releasing answered first contacts failed; they keep their turns',
      );
    }
  }

  /**
   * Every SWEEP_INTERVAL: lines whose head is not due get it made due (a line of the previous version,
   * or a superseded job's attempt past the on-wire limit), jobs waiting for their line past their
   * deadline end `expired`, registrations whose start was lost start, and a claim run takes whatever due
   * job lost its start.
   */
  private async sweep(): Promise<void> {
    try {
      this.take(await repairLines(this.o.db, ON_WIRE_LIMIT_MS, CLAIM_LEASE_MS));
      const expired = await expireWaiting(this.o.db, this.o.health, CLAIM_LEASE_MS);
      for (const kind of expired.events) {
        configEvents.inc({ kind });
        if (kind === 'stopped') configsFailing.inc();
      }
      this.wake(expired.woken);
      this.take(expired.due);
      await startLostRegistrations(this.o.db, this.o.starter.client, this.o.starter.taskQueue, this.o.logger);
    } catch (err) {
      this.o.logger.warn({ err: messageOf(err) }, 'sweep failed; the next one retries');
    }
    this.kick();
  }

  /**
   * A failed claim run (a query error, the pool's connect timeout, Temporal away) runs again after 1 s,
   * the wait doubling while runs keep failing, at most SWEEP_INTERVAL. One retry is pending at a time,
   * however many kicks fail.
   */
  private retryLater(err: unknown): void {
    if (this.stopped) return;
    if (this.retryTimer) {
      this.o.logger.debug({ err: messageOf(err) }, 'claim run failed; a retry is pending');
      return;
    }
    const retryMs = Math.min(1_000 * 2 ** Math.min(this.failedRuns++, 16), this.o.sweepIntervalMs);
    this.o.logger.warn({ err: messageOf(err), retryMs }, 'claim run failed; retrying');
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.kick();
    }, retryMs);
    this.retryTimer.unref();
  }

  /** Claim runs at these times (epoch ms, this process's clock), a little after each; one timer, for the next. */
  private kickAt(times: number[]): void {
    if (this.stopped) return;
    this.turns.push(...times);
    this.turns.sort((a, b) => a - b);
    if (this.turnTimer) clearTimeout(this.turnTimer);
    if (this.turns.length === 0) return;
    this.turnTimer = setTimeout(
      () => {
        this.turnTimer = undefined;
        const now = Date.now();
        this.turns = this.turns.filter((t) => t + 25 > now);
        this.kick();
        this.kickAt([]);
      },
      Math.max(0, this.turns[0]! - Date.now()) + 25,
    );
    this.turnTimer.unref();
  }

  private count(tenantId: string, by: number): void {
    this.inFlight += by;
    const n = (this.byTenant.get(tenantId) ?? 0) + by;
    if (n > 0) this.byTenant.set(tenantId, n);
    else this.byTenant.delete(tenantId);
  }

  private track(p: Promise<unknown>): void {
    const tracked = p.catch(() => undefined).finally(() => this.work.delete(tracked));
    this.work.add(tracked);
  }
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));
