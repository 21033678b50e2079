import type { EagerBudget } from './client';

/**
 * Eager starts in flight per tenant, in one process (its relay's starts). An eager start hands the new
 * run's first workflow task straight to this process's worker, past Temporal's task queue and so past
 * its tenant fairness: without a bound, one tenant's burst could take every eager slot the worker has,
 * and another tenant's fresh job would then wait in the queue. A job holds its tenant's place from its
 * eager start until its first attempt call ends in this process (the local attempt that ran inside the
 * eagerly started task), or `forgetMs` at the latest (the task never came here). Past `perTenant`
 * places the start goes through the task queue, where the fairness key orders it among the other
 * tenants' work. Only fast-lane starts take places: a slow-lane run's first task only schedules an
 * activity.
 */
export class EagerStarts implements EagerBudget {
  private readonly jobs = new Map<string, { tenant: string; at: number }>();
  private readonly counts = new Map<string, number>();

  constructor(
    readonly perTenant = EAGER_PLACES_PER_TENANT,
    private readonly forgetMs = FORGET_EAGER_START_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * A place for an eager start of `jobId`, or false: its tenant has `perTenant` in flight here, or the
   * job already holds one (another start of it is under way: that one's is not eager).
   */
  take(jobId: string, tenant: string): boolean {
    if (this.jobs.has(jobId)) return false;
    this.forgetOld();
    const n = this.counts.get(tenant) ?? 0;
    if (n >= this.perTenant) return false;
    this.counts.set(tenant, n + 1);
    this.jobs.set(jobId, { tenant, at: this.now() });
    return true;
  }

  /** The job's place goes back: its start was not eager after all, or its first attempt call ended. */
  done(jobId: string): void {
    const j = this.jobs.get(jobId);
    if (!j) return;
    this.jobs.delete(jobId);
    const n = (this.counts.get(j.tenant) ?? 1) - 1;
    if (n > 0) this.counts.set(j.tenant, n);
    else this.counts.delete(j.tenant);
  }

  /** Places in flight: of one tenant, or of all. */
  inFlight(tenant?: string): number {
    this.forgetOld();
    return tenant === undefined ? this.jobs.size : (this.counts.get(tenant) ?? 0);
  }

  private forgetOld(): void {
    const before = this.now() - this.forgetMs;
    // Oldest first (a Map keeps insertion order): stop at the first one still young.
    for (const [id, j] of this.jobs) {
      if (j.at > before) break;
      this.done(id);
    }
  }
}

/**
 * Eager starts in flight per tenant and process. 4 rather than 8: full benchmark 9 (d), tenant B's p50
 * 3.35-4.72 × idle against 4.46-5.45 × (6: 4.45-4.65 ×); it costs one tenant alone about a tenth of
 * benchmark 1 against 6 (docs/decisions.md, "Eager places").
 */
export const EAGER_PLACES_PER_TENANT = 4;

/** Past an attempt's start-to-close timeout (2 min): a place not given back by then is forgotten. */
export const FORGET_EAGER_START_MS = 3 * 60_000;
