/**
 * The retry schedule (§3): d = min(max, initial × factor^(n−1)) × U(0.8, 1.2); with Retry-After r,
 * max(d, min(r, max)); no wait after the last attempt; a wait past the deadline ends the job expired.
 */
import fc from 'fast-check';
import { nextStep, retryDelayMs, type RetrySettings } from '../../src/delivery/schedule';

const settings: fc.Arbitrary<RetrySettings> = fc
  .record({
    initialMs: fc.integer({ min: 1, max: 3_600_000 }),
    factor: fc.double({ min: 1, max: 100, noNaN: true }),
    maxMs: fc.integer({ min: 1, max: 30 * 86_400_000 }),
    maxAttempts: fc.integer({ min: 1, max: 100 }),
  })
  .filter((s) => s.initialMs <= s.maxMs);
const jitter = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true });
const attempt = fc.integer({ min: 1, max: 100 });
const retryAfter = fc.option(fc.integer({ min: 0, max: 60 * 86_400_000 }), { nil: undefined });

const base = (n: number, s: RetrySettings) => Math.min(s.maxMs, s.initialMs * Math.pow(s.factor, n - 1));

describe('retry schedule (properties)', () => {
  it('the jitter stays inside its band: 0.8 to 1.2 times the capped base (rounded)', () => {
    fc.assert(
      fc.property(settings, attempt, jitter, (s, n, j) => {
        const d = retryDelayMs(n, j, s);
        const b = base(n, s);
        expect(d).toBeGreaterThanOrEqual(Math.round(0.8 * b));
        expect(d).toBeLessThanOrEqual(Math.round(1.2 * b));
        expect(Number.isInteger(d)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('at a fixed jitter the wait is monotone in the attempt number, and constant once capped', () => {
    fc.assert(
      fc.property(settings, attempt, jitter, (s, n, j) => {
        const a = retryDelayMs(n, j, s);
        const b = retryDelayMs(n + 1, j, s);
        expect(b).toBeGreaterThanOrEqual(a);
        if (base(n, s) === s.maxMs) expect(b).toBe(a);
      }),
      { numRuns: 2000 },
    );
  });

  it('the wait never passes 1.2 × RETRY_MAX, and Retry-After never pushes it past RETRY_MAX', () => {
    fc.assert(
      fc.property(settings, attempt, jitter, retryAfter, (s, n, j, r) => {
        const d = retryDelayMs(n, j, s, r);
        const plain = retryDelayMs(n, j, s);
        expect(d).toBeLessThanOrEqual(Math.round(1.2 * s.maxMs));
        if (r === undefined) expect(d).toBe(plain);
        else expect(d).toBe(Math.max(plain, Math.min(r, s.maxMs)));
        expect(d).toBeGreaterThanOrEqual(plain);
      }),
      { numRuns: 2000 },
    );
  });

  it('nextStep: exhausted at the last attempt, never a wait past the deadline, else exactly the delay', () => {
    fc.assert(
      fc.property(
        settings,
        attempt,
        jitter,
        retryAfter,
        fc.integer({ min: 0, max: 4_102_444_800_000 }),
        fc.integer({ min: -86_400_000, max: 60 * 86_400_000 }),
        (s, n, j, r, now, untilDeadline) => {
          const deadline = now + untilDeadline;
          const step = nextStep(n, now, deadline, j, s, r);
          if (n >= s.maxAttempts) return expect(step).toEqual({ kind: 'exhausted' });
          const d = retryDelayMs(n, j, s, r);
          if (now + d > deadline) return expect(step).toEqual({ kind: 'expired' });
          expect(step).toEqual({ kind: 'wait', waitMs: d });
        },
      ),
      { numRuns: 3000 },
    );
  });

  it('a whole plan: at most maxAttempts attempts, and their wait times sum to no later than the deadline', () => {
    fc.assert(
      fc.property(settings, fc.array(jitter, { minLength: 100, maxLength: 100 }), fc.nat(), (s, js, d) => {
        const deadline = d;
        let now = 0;
        let n = 1;
        for (;;) {
          const step = nextStep(n, now, deadline, js[n - 1]!, s);
          if (step.kind !== 'wait') break;
          now += step.waitMs;
          expect(now).toBeLessThanOrEqual(deadline);
          n++;
        }
        expect(n).toBeLessThanOrEqual(s.maxAttempts);
      }),
    );
  });
});
