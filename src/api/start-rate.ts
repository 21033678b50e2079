/**
 * When each start of a tenant may go, at `perSecond` with bursts of `burst` (the generic cell rate
 * algorithm: one "theoretical arrival time" per tenant, no timers). The dispatcher asks it for the jobs
 * whose first attempt goes to the slow lane (SLOW_LANE_START_RATE, issue 19): the first `burst` of a
 * quiet tenant go at once, the rest one every 1/`perSecond` s after, each given its own turn, so a
 * job held back is not asked again when its turn comes. Per process: with several api processes a
 * tenant's first contacts start at up to that many times the rate.
 */
export class StartRate {
  private readonly tat = new Map<string, number>();
  private readonly intervalMs: number;

  constructor(
    readonly perSecond: number,
    readonly burst: number = Math.max(1, Math.round(2 * perSecond)),
    private readonly maxTenants = 10_000,
  ) {
    if (!(perSecond > 0)) throw new Error('StartRate: perSecond must be positive');
    this.intervalMs = 1000 / perSecond;
  }

  /** The turns (epoch ms, ≥ `now`) of `n` more starts of `tenant`, in order: `now` means at once. */
  turns(tenant: string, n: number, now: number): number[] {
    if (n <= 0) return [];
    let tat = Math.max(this.tat.get(tenant) ?? now, now);
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      tat += this.intervalMs;
      out.push(Math.max(now, Math.ceil(tat - this.burst * this.intervalMs)));
    }
    if (!this.tat.has(tenant) && this.tat.size >= this.maxTenants)
      for (const [t, at] of this.tat) if (at <= now) this.tat.delete(t);
    this.tat.set(tenant, tat);
    return out;
  }
}
