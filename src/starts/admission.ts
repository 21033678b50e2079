/**
 * Admission: which due jobs start now, in which order and in which lane. Pure: the relay
 * (src/starts/relay.ts) reads what it needs, calls `admit`, and does the I/O around it.
 *
 * - Round robin by tenant, each tenant's jobs in commit order: every tenant's oldest, then every
 *   tenant's second, ... (tenants in the order of their oldest job), so that one tenant's burst delays
 *   another tenant's due job by at most one round.
 * - A first contact (a job whose target has no 2xx within the known window, or is suspect) starts in the
 *   slow lane, at its tenant's rate: `perSecond`, with bursts of `burst` (the generic cell rate
 *   algorithm: one theoretical arrival time per tenant, `tat`). One past the rate is not started: it
 *   gets its turn, and starts then without taking another (`hadTurn`). Each first contact costs Temporal
 *   several round trips to start and join its target's line, and a tenant writing 1,000 of them to dead
 *   hosts at once saturated the server for everyone (benchmark 9 (a), (b)).
 * - Every other job starts in the fast lane.
 */
export interface Candidate {
  id: string;
  tenantId: string;
  /** Commit order (delivery_jobs.seq). */
  seq: number;
  /** Its target has no recent 2xx, or is suspect: it starts in the slow lane, at its tenant's rate. */
  firstContact: boolean;
  /** It had its turn from an earlier admission (`start_after`): it takes no other. */
  hadTurn: boolean;
}

export interface FirstContactRate {
  perSecond: number;
  burst: number;
}

/**
 * First contacts per tenant: 10 a second, bursts of 20. Benchmark 9 (a): a tenant's 1,000 jobs to a
 * dead host start over 100 s instead of at once, and the other tenant's p50 stays at its idle figure;
 * the dead host's line takes OUTBOUND_HOST_CONCURRENCY calls per DELIVERY_TIMEOUT anyway, so the turns
 * cost its jobs nothing (docs/decisions.md, "Starts").
 */
export const FIRST_CONTACT_RATE: FirstContactRate = { perSecond: 10, burst: 20 };

export type Lane = 'fast' | 'slow';

export interface Admission {
  /** Started now, in this order. */
  start: Array<{ id: string; lane: Lane }>;
  /** First contacts past their tenant's rate, each with its turn (epoch ms, after `now`). */
  later: Array<{ id: string; turn: number }>;
  /** The theoretical arrival time of each tenant whose first contacts took turns (epoch ms). */
  tat: Map<string, number>;
}

export function admit(
  candidates: readonly Candidate[],
  tat: ReadonlyMap<string, number>,
  now: number,
  rate: FirstContactRate = FIRST_CONTACT_RATE,
): Admission {
  const byTenant = new Map<string, Candidate[]>();
  for (const c of [...candidates].sort((a, b) => a.seq - b.seq)) {
    const mine = byTenant.get(c.tenantId);
    if (mine) mine.push(c);
    else byTenant.set(c.tenantId, [c]);
  }
  const interval = 1000 / rate.perSecond;
  const newTat = new Map<string, number>();
  const later: Admission['later'] = [];
  // Each tenant's jobs that start now, in commit order.
  const queues: Array<Array<{ id: string; lane: Lane }>> = [];
  for (const [tenant, jobs] of byTenant) {
    let t = Math.max(tat.get(tenant) ?? now, now);
    const queue: Array<{ id: string; lane: Lane }> = [];
    for (const j of jobs) {
      if (j.firstContact && !j.hadTurn) {
        t += interval;
        const at = t - rate.burst * interval;
        if (at > now) {
          later.push({ id: j.id, turn: Math.ceil(at) });
          continue;
        }
      }
      queue.push({ id: j.id, lane: j.firstContact ? 'slow' : 'fast' });
    }
    if (jobs.some((j) => j.firstContact && !j.hadTurn)) newTat.set(tenant, t);
    queues.push(queue);
  }
  // Round robin: the k-th job of every tenant before any tenant's (k+1)-th.
  const start: Admission['start'] = [];
  for (let k = 0; queues.some((q) => k < q.length); k++)
    for (const q of queues) if (k < q.length) start.push(q[k]!);
  return { start, later, tat: newTat };
}
