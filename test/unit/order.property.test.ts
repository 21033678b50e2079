/**
 * Ordered delivery (DELIVERY_ORDER=per_config, docs/decisions.md "Ordered delivery"): one config's line
 * as a state machine driven by random commands (new events, supersede by the bound, attempts starting
 * and returning with any outcome, deadlines, delete of the config). The gate is src/delivery/order.ts;
 * the model checks its own rule beside it: no push starts while an earlier job of the config has not
 * ended or has an attempt on the wire, and every job ends once the line is driven.
 */
import fc from 'fast-check';
import { isFinished, type JobStatus } from '../../src/delivery/types';
import { heldBy, holdsLine, nextInLine, type LineJob } from '../../src/delivery/order';

type Gate = (seq: bigint, line: readonly LineJob[]) => LineJob | undefined;
type Next = (seq: bigint, line: readonly LineJob[]) => LineJob | undefined;

interface ModelJob extends LineJob {
  attempts: number;
  /** Its workflow sleeps on `wake` after a held answer (waitingFor); only a wake (or a recheck) calls again. */
  asleep: boolean;
}

const MAX_ATTEMPTS = 3;

type Command =
  | { t: 'event' }
  | { t: 'supersede' }
  | { t: 'call'; pick: number }
  | { t: 'complete'; pick: number; outcome: '2xx' | 'retryable' | 'final' }
  | { t: 'expire'; pick: number }
  | { t: 'recheck'; pick: number }
  | { t: 'delete' };

const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({ t: 'event' as const }) },
  { weight: 2, arbitrary: fc.constant({ t: 'supersede' as const }) },
  { weight: 5, arbitrary: fc.record({ t: fc.constant('call' as const), pick: fc.nat() }) },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant('complete' as const),
      pick: fc.nat(),
      outcome: fc.constantFrom('2xx' as const, 'retryable' as const, 'final' as const),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('expire' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('recheck' as const), pick: fc.nat() }) },
);
/** Up to 40 commands; in one run of five, the config is deleted somewhere among them (it ends the line). */
const commands: fc.Arbitrary<Command[]> = fc
  .tuple(
    fc.array(command, { minLength: 4, maxLength: 40, size: 'max' }),
    fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.nat() }),
  )
  .map(([cmds, at]) =>
    at === undefined
      ? cmds
      : [
          ...cmds.slice(0, at % (cmds.length + 1)),
          { t: 'delete' as const },
          ...cmds.slice(at % (cmds.length + 1)),
        ],
  );

/** The model's own rule, without order.ts: the earlier jobs that still hold `seq` back. */
const holdersOf = (jobs: readonly ModelJob[], seq: bigint) =>
  jobs.filter((j) => j.seq < seq && (!isFinished(j.status) || j.openAttempt));

/** A snapshot of the line as the activity reads it (the gate must not see the model's own fields). */
const lineOf = (jobs: readonly ModelJob[]): LineJob[] =>
  jobs.map(({ id, seq, status, openAttempt }) => ({ id, seq, status, openAttempt }));

class ConfigLine {
  jobs: ModelJob[] = [];
  deleted = false;
  /** Every push that started: job id and attempt number, in order. */
  starts: Array<{ id: string; n: number }> = [];
  private seq = 0n;

  constructor(
    private readonly gate: Gate,
    private readonly next: Next,
  ) {}

  private unfinished = () => this.jobs.filter((j) => !isFinished(j.status));

  /** The invariant, from the model's own state: nothing earlier is unfinished or on the wire. */
  private checkStart(j: ModelJob): void {
    const holders = holdersOf(this.jobs, j.seq);
    if (holders.length > 0)
      throw new Error(
        `push of ${j.id} (attempt ${j.attempts + 1}) started while ${holders
          .map((h) => `${h.id} is ${h.status}${h.openAttempt ? ' with an attempt on the wire' : ''}`)
          .join(', ')}`,
      );
  }

  private wake(ids: string[]): void {
    for (const j of this.jobs) if (ids.includes(j.id)) j.asleep = false;
  }

  /** The activity call that ends a job (final, nothing on the wire) wakes the line (wakeLine). */
  private ended(j: ModelJob): void {
    if (!isFinished(j.status) || j.openAttempt) return;
    if (['cancelled', 'auth_failed', 'stopped'].includes(j.status))
      this.wake(this.unfinished().map((u) => u.id));
    else {
      const n = this.next(j.seq, lineOf(this.jobs));
      if (n) this.wake([n.id]);
    }
  }

  /** A new event: the config's next job, at the end of its line. Nothing after the config's delete. */
  event(): void {
    if (this.deleted) return;
    this.seq += 1n + BigInt(this.jobs.length % 2); // seq has gaps (other configs' jobs)
    this.jobs.push({
      id: `job-${this.jobs.length + 1}`,
      seq: this.seq,
      status: 'queued',
      openAttempt: false,
      attempts: 0,
      asleep: false,
    });
  }

  /** The per-config bound: the oldest unfinished job is superseded; an attempt on the wire stays open. */
  supersede(): void {
    const j = this.unfinished()[0];
    if (!j) return;
    j.status = 'superseded';
    // The API wakes its workflow; its activity sees it ended and wakes the next (after the attempt returns).
    this.ended(j);
  }

  /** Jobs whose workflow would call the activity now: unfinished, nothing on the wire, not asleep. */
  callable = () => this.jobs.filter((j) => !isFinished(j.status) && !j.openAttempt && !j.asleep);

  /**
   * One activity call of a waiting job: a queued job asks the gate (held: asleep until woken); a job
   * waiting for a retry makes its next attempt (it passed the gate before its first one).
   */
  call(j: ModelJob): 'started' | 'held' {
    if (j.status === 'queued') {
      const ahead = this.gate(j.seq, lineOf(this.jobs));
      if (ahead) {
        j.asleep = true;
        return 'held';
      }
    }
    this.checkStart(j);
    j.status = 'in_flight';
    j.openAttempt = true;
    j.attempts++;
    this.starts.push({ id: j.id, n: j.attempts });
    return 'started';
  }

  /** The attempt on the wire returns; a 2xx always lands (even on a superseded or cancelled job). */
  complete(j: ModelJob, outcome: '2xx' | 'retryable' | 'final'): void {
    j.openAttempt = false;
    if (outcome === '2xx') j.status = 'delivered';
    else if (j.status === 'in_flight')
      j.status = outcome === 'final' ? 'failed' : j.attempts >= MAX_ATTEMPTS ? 'exhausted' : 'waiting_retry';
    this.ended(j);
  }

  /** A waiting job (queued, held or in backoff) reaches its deadline: its next call ends it expired. */
  expire(j: ModelJob): void {
    j.status = 'expired';
    j.asleep = false;
    this.ended(j);
  }

  /** The config is deleted: every unfinished job is cancelled at once (attempts on the wire stay open). */
  delete(): void {
    this.deleted = true;
    for (const j of this.unfinished()) j.status = 'cancelled';
    for (const j of this.jobs) this.ended(j);
  }

  run(c: Command): void {
    const pickOf = <T>(xs: T[], pick: number) => (xs.length ? xs[pick % xs.length] : undefined);
    switch (c.t) {
      case 'event':
        return this.event();
      case 'supersede':
        return this.supersede();
      case 'call': {
        const j = pickOf(this.callable(), c.pick);
        if (j) this.call(j);
        return;
      }
      case 'complete': {
        const j = pickOf(
          this.jobs.filter((x) => x.openAttempt),
          c.pick,
        );
        if (j) this.complete(j, c.outcome);
        return;
      }
      case 'expire': {
        const j = pickOf(
          this.jobs.filter((x) => !isFinished(x.status) && !x.openAttempt),
          c.pick,
        );
        if (j) this.expire(j);
        return;
      }
      case 'recheck': {
        // The waiter's own timer (30 s / 5 min): a lost wake is repaired by asking again.
        const j = pickOf(
          this.jobs.filter((x) => x.asleep),
          c.pick,
        );
        if (j) j.asleep = false;
        return;
      }
      case 'delete':
        return this.delete();
    }
  }

  /**
   * Drives the line to its end with no rechecks (only wakes call a held job again): attempts on the
   * wire return 2xx, every callable job calls. Answers whether every job ended.
   */
  drive(): boolean {
    for (let step = 0; step < 10 * (this.jobs.length + 1); step++) {
      const open = this.jobs.find((j) => j.openAttempt);
      if (open) {
        this.complete(open, '2xx');
        continue;
      }
      const j = this.callable()[0];
      if (!j) break;
      this.call(j);
    }
    return this.jobs.every((j) => isFinished(j.status) && !j.openAttempt);
  }
}

/**
 * The property, for a gate and a wake rule (the production ones, or broken ones below). It checks the
 * model's own rule at every start (ConfigLine.checkStart), never the gate's answer against itself.
 */
const lineProperty = (gate: Gate = heldBy, next: Next = nextInLine) =>
  fc.property(commands, (cmds) => {
    const line = new ConfigLine(gate, next);
    for (const c of cmds) line.run(c);
    if (!line.drive())
      throw new Error(
        `the line did not end: ${line.jobs
          .filter((j) => !isFinished(j.status) || j.openAttempt)
          .map((j) => `${j.id} ${j.status}${j.asleep ? ' asleep' : ''}${j.openAttempt ? ' on the wire' : ''}`)
          .join(', ')}`,
      );
    // Pushes start in line order: a job's first attempt never comes before an earlier job's last one.
    const firstStart = new Map<string, number>();
    const lastStart = new Map<string, number>();
    line.starts.forEach((s, i) => {
      if (!firstStart.has(s.id)) firstStart.set(s.id, i);
      lastStart.set(s.id, i);
    });
    const bySeq = line.jobs.filter((j) => firstStart.has(j.id));
    for (let i = 1; i < bySeq.length; i++)
      expect(firstStart.get(bySeq[i]!.id)!).toBeGreaterThan(lastStart.get(bySeq[i - 1]!.id)!);
  });

const job = (seq: number, status: JobStatus, openAttempt = false): LineJob => ({
  id: `j${seq}`,
  seq: BigInt(seq),
  status,
  openAttempt,
});

describe('ordered delivery: the line of one config (state machine)', () => {
  it('no push starts while an earlier job is unfinished or on the wire, and every job ends', () => {
    fc.assert(lineProperty(), { numRuns: 3000 });
  });

  it('heldBy names, in every state the commands reach, the nearest earlier job the model says holds the line', () => {
    fc.assert(
      fc.property(commands, (cmds) => {
        const line = new ConfigLine(heldBy, nextInLine);
        for (const c of [...cmds, { t: 'event' as const }]) {
          line.run(c);
          const snapshot = lineOf(line.jobs);
          for (const j of line.jobs) {
            const holders = holdersOf(line.jobs, j.seq);
            const [got, want] = [heldBy(j.seq, snapshot)?.id, holders[holders.length - 1]?.id];
            if (got !== want) throw new Error(`heldBy(${j.id}) is ${got}, the model says ${want}`);
          }
        }
      }),
      { numRuns: 1000 },
    );
  });

  // Tests of the test: the same property, run against broken gates and wakes, must fail, and for the
  // reason the break causes (a push too early, or a line that never ends).
  const failureOf = (gate: Gate, next: Next = nextInLine) => {
    const r = fc.check(lineProperty(gate, next), { numRuns: 3000 });
    return { failed: r.failed, message: String((r.errorInstance as Error | undefined)?.message), r };
  };

  it('it catches a gate that ignores attempts on the wire (a superseded job still sending)', () => {
    const ignoresWire: Gate = (seq, line) =>
      heldBy(
        seq,
        line.map((j) => ({ ...j, openAttempt: false })),
      );
    const f = failureOf(ignoresWire);
    expect(f.failed).toBe(true);
    expect(f.message).toMatch(/started while job-\d+ is (superseded|cancelled) with an attempt on the wire/);
    // Shrunk, the counterexample is an attempt started, its job superseded, and a later push starting.
    expect(f.r.counterexample?.[0]?.map((c) => c.t)).toEqual(
      expect.arrayContaining(['event', 'call', 'supersede']),
    );
  });

  it('it catches a gate that looks only at the job just before', () => {
    const nearestOnly: Gate = (seq, line) => {
      const before = line.filter((j) => j.seq < seq).sort((a, b) => (a.seq < b.seq ? 1 : -1))[0];
      return before && holdsLine(before) ? before : undefined;
    };
    expect(failureOf(nearestOnly).message).toMatch(/started while/);
  });

  it('it catches a gate that never holds', () => {
    expect(failureOf(() => undefined).message).toMatch(/started while/);
  });

  it('it catches a gate that never lets a job go', () => {
    const always: Gate = (seq, line) => line.find((j) => j.seq !== seq) ?? line[0];
    expect(failureOf(always).message).toMatch(/the line did not end/);
  });

  it('it catches a wake sent to the next job by number even when that one has ended (a lost wake)', () => {
    const nextByNumber: Next = (seq, line) => {
      const n = line.filter((j) => j.seq > seq).sort((a, b) => (a.seq < b.seq ? -1 : 1))[0];
      return n && !isFinished(n.status) ? n : undefined;
    };
    expect(failureOf(heldBy, nextByNumber).message).toMatch(/the line did not end: .*asleep/);
  });
});

describe('nextInLine: who is woken when a job ends', () => {
  const statuses: JobStatus[] = [
    'queued',
    'in_flight',
    'waiting_retry',
    'delivered',
    'failed',
    'exhausted',
    'expired',
    'cancelled',
    'superseded',
    'auth_failed',
    'stopped',
  ];
  const lineArb = fc.uniqueArray(fc.integer({ min: 1, max: 60 }), { maxLength: 20 }).chain((seqs) =>
    fc.tuple(
      ...seqs.map((s) =>
        fc.record({
          id: fc.constant(`j${s}`),
          seq: fc.constant(BigInt(s)),
          status: fc.constantFrom(...statuses),
          openAttempt: fc.boolean(),
        }),
      ),
    ),
  );

  it('is the first unfinished job after the one that ended, in any order the rows come', () => {
    fc.assert(
      fc.property(lineArb, fc.integer({ min: 0, max: 61 }), (line, s) => {
        const expected = [...line]
          .sort((a, b) => (a.seq < b.seq ? -1 : 1))
          .find((j) => j.seq > BigInt(s) && !isFinished(j.status));
        expect(nextInLine(BigInt(s), line)?.id).toBe(expected?.id);
        expect(nextInLine(BigInt(s), [...line].reverse())?.id).toBe(expected?.id);
      }),
      { numRuns: 2000 },
    );
  });

  it('examples', () => {
    expect(nextInLine(1n, [])).toBeUndefined();
    expect(nextInLine(1n, [job(1, 'delivered')])).toBeUndefined();
    // Skips ended jobs (superseded, delivered) and earlier ones.
    expect(
      nextInLine(2n, [job(1, 'queued'), job(3, 'superseded'), job(5, 'queued'), job(4, 'delivered')])?.id,
    ).toBe('j5');
    // A later job in backoff or on the wire is unfinished: it is the next (its wake keeps its schedule).
    expect(nextInLine(2n, [job(7, 'queued'), job(6, 'waiting_retry')])?.id).toBe('j6');
    // An ended job with an attempt on the wire is not woken: it makes no new attempt.
    expect(nextInLine(2n, [job(3, 'cancelled', true), job(4, 'queued')])?.id).toBe('j4');
  });
});

describe('heldBy: examples', () => {
  it('nothing ahead, or everything ahead ended: not held', () => {
    expect(heldBy(1n, [])).toBeUndefined();
    expect(heldBy(5n, [job(1, 'delivered'), job(2, 'failed'), job(3, 'expired'), job(4, 'superseded')])).toBe(
      undefined,
    );
  });

  it('later jobs and the job itself never hold it', () => {
    expect(
      heldBy(3n, [job(3, 'queued'), job(4, 'in_flight', true), job(9, 'waiting_retry')]),
    ).toBeUndefined();
  });

  it('an earlier unfinished job holds it, whatever its status', () => {
    for (const s of ['queued', 'in_flight', 'waiting_retry'] as const)
      expect(heldBy(3n, [job(2, s)])?.id).toBe('j2');
  });

  it('an ended job holds the line while its attempt is on the wire (superseded or cancelled mid-request)', () => {
    expect(heldBy(3n, [job(1, 'superseded', true), job(2, 'delivered')])?.id).toBe('j1');
    expect(heldBy(3n, [job(2, 'cancelled', true)])?.id).toBe('j2');
    expect(heldBy(3n, [job(2, 'cancelled', false)])).toBeUndefined();
  });

  it('names the nearest of the jobs that hold it', () => {
    expect(heldBy(9n, [job(4, 'superseded', true), job(1, 'queued'), job(7, 'waiting_retry')])?.id).toBe(
      'j7',
    );
    expect(heldBy(9n, [job(7, 'waiting_retry'), job(8, 'superseded', true), job(1, 'queued')])?.id).toBe(
      'j8',
    );
  });

  it('holdsLine: unfinished, or ended with an attempt on the wire', () => {
    expect(holdsLine({ status: 'queued', openAttempt: false })).toBe(true);
    expect(holdsLine({ status: 'delivered', openAttempt: false })).toBe(false);
    expect(holdsLine({ status: 'superseded', openAttempt: true })).toBe(true);
  });
});
