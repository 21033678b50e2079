/**
 * SLOW_LANE_START_RATE's schedule (src/api/start-rate.ts): a quiet tenant's first `burst` starts go at
 * once, the rest 1/rate apart, each tenant on its own; and, for any sequence of asks, no stretch of
 * time holds more turns than the burst plus the rate allows.
 */
import fc from 'fast-check';
import { StartRate } from '../../src/api/start-rate';

it('a burst goes at once, the rest one every 1/rate, in the order asked; another tenant is not behind it', () => {
  const r = new StartRate(10); // burst 20, one every 100 ms
  expect(r.burst).toBe(20);
  const t0 = 1_000_000;
  const a = r.turns('a', 25, t0);
  expect(a.slice(0, 20)).toEqual(Array(20).fill(t0));
  expect(a.slice(20)).toEqual([t0 + 100, t0 + 200, t0 + 300, t0 + 400, t0 + 500]);
  // Asked again later in the same second: behind its own earlier turns.
  expect(r.turns('a', 1, t0 + 50)).toEqual([t0 + 600]);
  // Tenant b has its own burst.
  expect(r.turns('b', 3, t0 + 50)).toEqual([t0 + 50, t0 + 50, t0 + 50]);
  // After a quiet while the burst is back.
  expect(r.turns('a', 20, t0 + 10_000)).toEqual(Array(20).fill(t0 + 10_000));
});

it('refuses a rate that is not positive', () => {
  expect(() => new StartRate(0)).toThrow(/positive/);
});

it('property: any k turns of one tenant span at least (k − burst) / rate seconds', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 50 }),
      fc.array(fc.record({ gap: fc.integer({ min: 0, max: 2_000 }), n: fc.integer({ min: 0, max: 40 }) }), {
        maxLength: 30,
      }),
      (rate, asks) => {
        const r = new StartRate(rate);
        let now = 0;
        const turns: number[] = [];
        for (const { gap, n } of asks) {
          now += gap;
          const t = r.turns('x', n, now);
          // Never before the ask, and in order.
          for (let i = 0; i < t.length; i++) {
            expect(t[i]).toBeGreaterThanOrEqual(now);
            if (i > 0) expect(t[i]).toBeGreaterThanOrEqual(t[i - 1]!);
          }
          turns.push(...t);
        }
        turns.sort((a, b) => a - b);
        // k turns span at least (k − burst) intervals (less 1 ms: turns are rounded up to the ms).
        let worst = Infinity;
        for (let i = 0; i < turns.length; i++)
          for (let j = i + r.burst; j < turns.length; j++)
            worst = Math.min(worst, turns[j]! - turns[i]! - ((j - i + 1 - r.burst) * 1000) / rate + 1);
        expect(worst).toBeGreaterThanOrEqual(0);
      },
    ),
    { numRuns: 200 },
  );
});
