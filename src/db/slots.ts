import { Counter, Histogram } from 'prom-client';
import type { CallHealth } from '../delivery/health';
import type { Db } from './pool';

/**
 * Host isolation (contract §10): at most `capacity` calls to one target on the wire at once, across
 * every worker (the slots are rows in Postgres, migration 010). A call that finds its target full
 * waits in line without holding a worker slot; a released slot is granted to the next waiter, round
 * robin by tenant, and the caller wakes the waiters it was granted to.
 */
export interface SlotSettings {
  /** OUTBOUND_HOST_CONCURRENCY */
  capacity: number;
  /** OUTBOUND_HOST_CONCURRENCY_BY_TARGET: targets whose bound is not `capacity`. */
  byTarget?: ReadonlyMap<string, number>;
  /** A slot's lease: renewed while its call runs; what a killed worker's slot is held at most. */
  leaseMs: number;
  /** How long a place in line is kept without its waiter coming back. */
  waitMs: number;
  /**
   * How long a slot granted to a waiter is kept for it to come and take; one not taken goes back in
   * line at the waiter's place.
   */
  grantMs: number;
  /** How long a target that timed out, refused or was slow stays in the slow lane. */
  suspectMs: number;
  /**
   * How long after its last 2xx a target counts as known to answer: the lean type makes local
   * attempts (held inside a workflow task) only to such targets.
   */
  knownMs: number;
}

export const DEFAULT_SLOT_SETTINGS: Omit<SlotSettings, 'capacity'> = {
  // The delivery activity's heartbeat timeout: a killed worker's slot comes back no later than that.
  leaseMs: 20_000,
  waitMs: 15 * 60_000,
  grantMs: 2 * 60_000,
  suspectMs: 10 * 60_000,
  knownMs: 10 * 60_000,
};

const targetOfUrl = (u: URL) => `${u.hostname}:${u.port || (u.protocol === 'http:' ? '80' : '443')}`;

/** Target of a URL: host name or literal address, plus port (443 when absent). Never path or query. */
export function targetOf(url: string): string {
  return targetOfUrl(new URL(url));
}

/**
 * A config URL parsed once for a job's start: `host` for its summary (as `hostOf`), `target` for the
 * lane hint; `?` and no target for one that does not parse.
 */
export function hostAndTarget(url: string): { host: string; target?: string } {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return { host: '?' };
  }
  return { host: u.host, target: targetOfUrl(u) };
}

export const slotWaits = new Counter({
  name: 'a2a_push_host_slot_waits_total',
  help: 'Calls that found their target at OUTBOUND_HOST_CONCURRENCY and waited in line (no host label: unbounded)',
  labelNames: ['kind'] as const,
  registers: [],
});

export const slotHeld = new Histogram({
  name: 'a2a_push_host_slot_held_seconds',
  help: 'How long a delivery attempt held its host slot: from the statement that took it to the one that gave it back (the POST plus the database around it)',
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 60],
  registers: [],
});

export interface Acquired {
  acquired: boolean;
  /** The target is in the slow lane (it recently timed out, refused or was slow). */
  suspect: boolean;
  /** Other waiters granted a free slot meanwhile: wake them. */
  granted: string[];
}

/** outbound_acquire's argument (migration 020), also the slot part of an attempt's begin. */
export interface SlotRequest {
  target: string;
  holder: string;
  tenant: string;
  capacity: number;
  leaseMs: number;
  waitMs: number;
  grantMs: number;
  /** A fast-lane call: a target in the slow lane gives it no slot and no place. */
  refuseSuspect: boolean;
  /** A fast-lane attempt: a target without a 2xx within this long takes nothing (it goes to the slow lane). */
  knownMs?: number | null;
}

/** outbound_release's argument (migration 020), also the slot part of an attempt's end. */
export interface SlotRelease {
  target: string;
  holder: string;
  capacity: number;
  grantMs: number;
  waitMs: number;
  suspectMs: number;
  health: CallHealth;
}

export class HostSlots {
  constructor(
    private readonly db: Db,
    readonly settings: SlotSettings,
  ) {}

  /** What taking a slot at `target` for `holder` asks (for an attempt's begin, or `acquire`). */
  request(target: string, holder: string, tenant: string, refuseSuspect: boolean): SlotRequest {
    return {
      target,
      holder,
      tenant,
      capacity: this.capacityOf(target),
      leaseMs: this.settings.leaseMs,
      waitMs: this.settings.waitMs,
      grantMs: this.settings.grantMs,
      refuseSuspect,
    };
  }

  /** What giving `holder`'s slot at `target` back asks (for an attempt's end, or `release`). */
  releaseOf(target: string, holder: string, health: CallHealth): SlotRelease {
    return {
      target,
      holder,
      capacity: this.capacityOf(target),
      grantMs: this.settings.grantMs,
      waitMs: this.settings.waitMs,
      suspectMs: this.settings.suspectMs,
      health,
    };
  }

  /**
   * Takes a slot, or a place in line. `refuseSuspect` (a call in the fast lane): a target in the slow
   * lane gives no slot and no place (`suspect` says to move).
   */
  async acquire(
    target: string,
    holder: string,
    tenantId: string,
    kind: 'push' | 'agent',
    refuseSuspect = false,
  ): Promise<Acquired> {
    const r = await this.db.query<{ o_acquired: boolean; o_suspect: boolean; o_granted: string[] }>(
      'SELECT o_acquired, o_suspect, o_granted FROM outbound_acquire($1::jsonb)',
      [this.request(target, holder, tenantId, refuseSuspect)],
    );
    return this.answer(r.rows[0]!, refuseSuspect, kind);
  }

  /**
   * What a call that asked for a slot got (from outbound_acquire, or outbox_attempt_begin, which calls
   * it): a call that was put in line counts as a wait.
   */
  answer(
    row: { o_acquired: boolean; o_suspect: boolean; o_granted: string[] },
    refuseSuspect: boolean,
    kind: 'push' | 'agent',
  ): Acquired {
    if (!row.o_acquired && !(row.o_suspect && refuseSuspect)) slotWaits.inc({ kind });
    return { acquired: row.o_acquired, suspect: row.o_suspect, granted: row.o_granted };
  }

  /** The bound of one target: its own (OUTBOUND_HOST_CONCURRENCY_BY_TARGET), else the default. */
  capacityOf(target: string): number {
    return this.settings.byTarget?.get(target) ?? this.settings.capacity;
  }

  /** Gives the slot (or the place in line) back; answers the holders granted the freed room. */
  async release(target: string, holder: string, health: CallHealth): Promise<string[]> {
    const r = await this.db.query<{ holder: string }>('SELECT outbound_release($1::jsonb) AS holder', [
      this.releaseOf(target, holder, health),
    ]);
    return r.rows.map((x) => x.holder);
  }

  /**
   * Whether `holder`'s call is still on the wire: its lease was renewed within the last half lease (a
   * live call renews it every third of the lease, `holding`). Such a call is run by a worker that was
   * only silent (a rerun of its attempt found it started); its slot stays its own until the call ends.
   */
  async onWire(target: string, holder: string): Promise<boolean> {
    const r = await this.db.query(
      `SELECT 1 FROM outbound_slots
        WHERE target = $1 AND holder = $2
          AND expires_at > now() + make_interval(secs => $3::double precision / 1000)`,
      [target, holder, this.settings.leaseMs / 2],
    );
    return r.rowCount! > 0;
  }

  /** Keeps a long call's lease alive: every third of the lease, while `fn` runs. */
  async holding<T>(target: string, holder: string, fn: () => Promise<T>): Promise<T> {
    const every = Math.max(1000, Math.floor(this.settings.leaseMs / 3));
    const timer = setInterval(() => {
      this.db
        .query(
          `UPDATE outbound_slots SET expires_at = now() + make_interval(secs => $3::double precision / 1000)
            WHERE target = $1 AND holder = $2`,
          [target, holder, this.settings.leaseMs],
        )
        .catch(() => undefined);
    }, every);
    try {
      return await fn();
    } finally {
      clearInterval(timer);
    }
  }
}
