/**
 * Admission (src/starts/admission.ts): which due jobs start now, in which order and lane. A table of
 * cases, then properties over random batches: no job is started twice or lost, each tenant's jobs keep
 * commit order, one tenant's burst delays another tenant's job by at most one round, the first-contact
 * rate holds, and no first contact starves.
 */
import fc from 'fast-check';
import { admit, FIRST_CONTACT_RATE, type Candidate } from '../../src/starts/admission';

const NOW = 1_000_000;
const job = (id: string, tenantId: string, seq: number, more: Partial<Candidate> = {}): Candidate => ({
  id,
  tenantId,
  seq,
  firstContact: false,
  hadTurn: false,
  ...more,
});
const ids = (a: ReturnType<typeof admit>) => a.start.map((s) => s.id);

describe('admit: cases', () => {
  it.each<[string, Candidate[], string[]]>([
    ['nothing to admit', [], []],
    [
      'one tenant: commit order',
      [job('a2', 'A', 2), job('a1', 'A', 1), job('a3', 'A', 3)],
      ['a1', 'a2', 'a3'],
    ],
    [
      'two tenants: round robin, the tenant with the oldest job first',
      [job('a1', 'A', 1), job('a2', 'A', 2), job('a3', 'A', 3), job('b1', 'B', 4), job('b2', 'B', 5)],
      ['a1', 'b1', 'a2', 'b2', 'a3'],
    ],
    [
      "a tenant's burst: another tenant's one job comes second",
      [...Array.from({ length: 50 }, (_, i) => job(`a${i}`, 'A', i)), job('b', 'B', 100)],
      ['a0', 'b', ...Array.from({ length: 49 }, (_, i) => `a${i + 1}`)],
    ],
    [
      'three tenants, B oldest',
      [job('c1', 'C', 7), job('a1', 'A', 3), job('b1', 'B', 1), job('b2', 'B', 2), job('a2', 'A', 9)],
      ['b1', 'a1', 'c1', 'b2', 'a2'],
    ],
  ])('%s', (_name, candidates, expected) => {
    const a = admit(candidates, new Map(), NOW);
    expect(ids(a)).toEqual(expected);
    expect(a.later).toEqual([]);
    expect(a.start.every((s) => s.lane === 'fast')).toBe(true);
  });

  it('a first contact starts in the slow lane; a job to a known target in the fast lane', () => {
    const a = admit([job('k', 'A', 1), job('f', 'A', 2, { firstContact: true })], new Map(), NOW);
    expect(a.start).toEqual([
      { id: 'k', lane: 'fast' },
      { id: 'f', lane: 'slow' },
    ]);
  });

  it("a quiet tenant's first 20 first contacts start at once; the rest get turns, one every 100 ms", () => {
    const burst = Array.from({ length: 25 }, (_, i) => job(`f${i}`, 'A', i, { firstContact: true }));
    const a = admit(burst, new Map(), NOW);
    expect(ids(a)).toEqual(burst.slice(0, 20).map((j) => j.id));
    expect(a.later).toEqual(burst.slice(20).map((j, i) => ({ id: j.id, turn: NOW + 100 * (i + 1) })));
    expect(a.tat.get('A')).toBe(NOW + 25 * 100);
  });

  it("on a clock with fractions of a millisecond (the database's), the 20th first contact still goes at once", () => {
    const now = NOW + 0.123;
    const burst = Array.from({ length: 21 }, (_, i) => job(`f${i}`, 'A', i, { firstContact: true }));
    const a = admit(burst, new Map(), now);
    expect(a.start).toHaveLength(20);
    expect(a.later).toEqual([{ id: 'f20', turn: Math.ceil(now + 100) }]);
  });

  it("past its rate, a tenant's first contacts wait for their turns while its other jobs start", () => {
    const a = admit(
      [
        job('f1', 'A', 1, { firstContact: true }),
        job('k1', 'A', 2),
        job('f2', 'A', 3, { firstContact: true }),
      ],
      new Map([['A', NOW + 5_000]]),
      NOW,
    );
    expect(a.start).toEqual([{ id: 'k1', lane: 'fast' }]);
    expect(a.later).toEqual([
      { id: 'f1', turn: NOW + 5_000 + 100 - 2_000 },
      { id: 'f2', turn: NOW + 5_000 + 200 - 2_000 },
    ]);
  });

  it('a first contact that had its turn starts at once and takes no other; other tenants are not charged', () => {
    const a = admit(
      [job('f1', 'A', 1, { firstContact: true, hadTurn: true }), job('g1', 'B', 2, { firstContact: true })],
      new Map([['A', NOW + 60_000]]),
      NOW,
    );
    expect(a.start).toEqual([
      { id: 'f1', lane: 'slow' },
      { id: 'g1', lane: 'slow' },
    ]);
    expect(a.tat.has('A')).toBe(false);
    expect(a.tat.get('B')).toBe(NOW + 100);
  });
});

describe('admit: properties', () => {
  const candidates = fc
    .array(
      fc.record({
        tenant: fc.constantFrom('A', 'B', 'C', 'D'),
        firstContact: fc.boolean(),
        hadTurn: fc.boolean(),
      }),
      { maxLength: 120 },
    )
    .map((xs) =>
      xs.map((x, i) => job(`j${i}`, x.tenant, i, { firstContact: x.firstContact, hadTurn: x.hadTurn })),
    );
  const tats = fc.dictionary(
    fc.constantFrom('A', 'B', 'C', 'D'),
    fc.integer({ min: NOW - 10_000, max: NOW + 10_000 }),
  );

  it('every job is either started or given a turn, once; started ones keep each tenant in commit order', () => {
    fc.assert(
      fc.property(candidates, tats, (cs, tat) => {
        const a = admit(cs, new Map(Object.entries(tat)), NOW);
        const all = [...a.start.map((s) => s.id), ...a.later.map((l) => l.id)];
        expect(all.sort()).toEqual(cs.map((c) => c.id).sort());
        const seqOf = new Map(cs.map((c) => [c.id, c]));
        for (const t of ['A', 'B', 'C', 'D']) {
          const seqs = a.start
            .map((s) => seqOf.get(s.id)!)
            .filter((c) => c.tenantId === t)
            .map((c) => c.seq);
          expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
        }
        // Turns are in the future; only first contacts that had no turn get one.
        for (const l of a.later) {
          expect(l.turn).toBeGreaterThan(NOW);
          expect(seqOf.get(l.id)!.firstContact && !seqOf.get(l.id)!.hadTurn).toBe(true);
        }
        // Lanes: a first contact in the slow lane, any other job in the fast lane.
        for (const s of a.start) expect(s.lane).toBe(seqOf.get(s.id)!.firstContact ? 'slow' : 'fast');
      }),
    );
  });

  it("one tenant's burst delays another tenant's first started job by at most one round", () => {
    fc.assert(
      fc.property(candidates, (cs) => {
        const a = admit(cs, new Map(), NOW);
        const tenantOf = new Map(cs.map((c) => [c.id, c.tenantId]));
        const tenants = new Set(a.start.map((s) => tenantOf.get(s.id)));
        // In the first round every tenant with a started job has its first one.
        const firstRound = new Set(a.start.slice(0, tenants.size).map((s) => tenantOf.get(s.id)));
        expect(firstRound).toEqual(tenants);
      }),
    );
  });

  it('the rate holds: over any window, a tenant starts at most burst + window × rate first contacts, and none starves', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 200 }), fc.integer({ min: 1, max: 5 }), (n, rounds) => {
        // A tenant writes n first contacts; each claim run admits what is due and gives turns to the rest;
        // a job whose turn has come is offered again (hadTurn), as the relay's claim runs do.
        const started: number[] = [];
        let tat = new Map<string, number>();
        let now = NOW;
        let offered = Array.from({ length: n }, (_, i) => job(`f${i}`, 'A', i, { firstContact: true }));
        let turns: Array<{ id: string; turn: number }> = [];
        for (let guard = 0; offered.length + turns.length > 0 && guard < 10_000; guard++) {
          const a = admit(offered, tat, now);
          for (const [k, v] of a.tat) tat = new Map(tat).set(k, v);
          for (const _ of a.start) started.push(now);
          turns.push(...a.later);
          // The next claim run: at the earliest turn (or `rounds` times more often, which changes nothing).
          const next = Math.min(...turns.map((t) => t.turn));
          now = next === Infinity ? now : now + Math.max(1, Math.ceil((next - now) / rounds));
          offered = turns
            .filter((t) => t.turn <= now)
            .map((t) => job(t.id, 'A', 0, { firstContact: true, hadTurn: true }));
          turns = turns.filter((t) => t.turn > now);
        }
        // None starves.
        expect(started).toHaveLength(n);
        // The rate: within any window [t, t + w], at most burst + w × rate starts.
        const perMs = FIRST_CONTACT_RATE.perSecond / 1000;
        let worst = -Infinity;
        for (let i = 0; i < started.length; i++)
          for (let k = i; k < started.length; k++)
            worst = Math.max(
              worst,
              k - i + 1 - FIRST_CONTACT_RATE.burst - Math.ceil((started[k]! - started[i]!) * perMs),
            );
        expect(worst).toBeLessThanOrEqual(0);
      }),
      { numRuns: 50 },
    );
  });
});
