import type { Db } from '../db/pool';

/**
 * Which targets a new job's first attempt may try in the fast lane: those with a 2xx within `knownMs`
 * and not suspect, the rule the fast lane's attempt applies itself (migration 016). The dispatcher
 * starts the other jobs' workflows in the slow lane at once (`lane: 'slow'`), which spares each first
 * contact the fast lane's untried `slow` answer: one activity and one workflow task (benchmark 9 (a):
 * 1,000 jobs to a dead host written at once). A hint only, the activity decides. Read from
 * outbound_targets; a known target is kept in this process for `knownTtlMs` (the idle path to a
 * healthy webhook reads nothing), an unknown one is read again each time (its first 2xx moves the next
 * job to the fast lane at once). A known target gone suspect meanwhile costs what it cost before: the
 * fast lane answers `slow`.
 */
export class KnownTargets {
  private readonly known = new Map<string, number>();
  private readonly knownMs: number;
  private readonly knownTtlMs: number;
  private readonly maxEntries: number;

  constructor(
    private readonly db: Db,
    o: { knownMs: number; knownTtlMs?: number; maxEntries?: number },
  ) {
    this.knownMs = o.knownMs;
    this.knownTtlMs = o.knownTtlMs ?? 10_000;
    this.maxEntries = o.maxEntries ?? 10_000;
  }

  /** Of these targets (`host:port`), the ones whose jobs start in the slow lane. None when the read fails. */
  async slow(targets: string[]): Promise<Set<string>> {
    // No hint when the read fails: the fast lane's own check sends these to the slow lane if need be.
    return (await this.unknownOf(targets)) ?? new Set();
  }

  /**
   * Of these targets, the ones not known (no 2xx lately, or suspect); undefined when the read fails.
   * `cached: false` reads every one, also those this process saw known within `knownTtlMs`.
   */
  async unknownOf(targets: string[], o: { cached?: boolean } = {}): Promise<Set<string> | undefined> {
    const now = Date.now();
    const cached = o.cached ?? true;
    const ask = [...new Set(targets)].filter((t) => !cached || (this.known.get(t) ?? 0) <= now);
    if (ask.length === 0) return new Set();
    let known: Set<string>;
    try {
      const r = await this.db.query<{ target: string }>(
        `SELECT target FROM outbound_targets
          WHERE target = ANY($1::text[])
            AND healthy_at > now() - make_interval(secs => $2::double precision / 1000)
            AND (suspect_until IS NULL OR suspect_until <= now())`,
        [ask, this.knownMs],
      );
      known = new Set(r.rows.map((x) => x.target));
    } catch {
      return undefined;
    }
    if (this.known.size + known.size > this.maxEntries)
      for (const [t, until] of this.known) if (until <= now) this.known.delete(t);
    if (this.known.size + known.size > this.maxEntries) this.known.clear();
    for (const t of known) this.known.set(t, now + this.knownTtlMs);
    return new Set(ask.filter((t) => !known.has(t)));
  }
}
