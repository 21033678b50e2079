/**
 * classifyAttempt against the contract's outcome table (§3), written out again here as a reference
 * that shares no code with the classifier, over every status code and failure kind.
 */
import fc from 'fast-check';
import { classifyAttempt, parseRetryAfter, type AttemptResult } from '../../src/delivery/classify';
import { GUARD_RULES } from '../../src/outbound/guard';

const ERROR_CODES = ['timeout', 'connection', 'dns', 'tls'] as const;
const FINAL = ['delivered', 'failed', 'auth_failed', 'stopped'];

function reference(r: AttemptResult): { outcome: string; job?: string; config?: string; reason: string } {
  if (r.kind === 'guard_refused')
    return { outcome: 'guard_refused', job: 'stopped', config: 'stopped', reason: `guard_refused:${r.rule}` };
  if (r.kind === 'error')
    return r.code === 'tls'
      ? { outcome: 'failed', job: 'failed', reason: 'tls' }
      : { outcome: 'retry', reason: r.code };
  const s = r.status;
  const reason = `http_${s}`;
  if (s >= 200 && s <= 299) return { outcome: 'delivered', job: 'delivered', reason };
  if ([429, 502, 503, 504].includes(s)) return { outcome: 'retry', reason };
  if (s === 401 || s === 403)
    return { outcome: 'auth_failed', job: 'auth_failed', config: 'auth_failed', reason };
  if (s === 404 || s === 410) return { outcome: 'stopped', job: 'stopped', config: 'stopped', reason };
  if (s >= 300 && s <= 399) return { outcome: 'failed', job: 'failed', reason: 'redirect' };
  return { outcome: 'failed', job: 'failed', reason };
}

const retryAfter = fc.oneof(
  fc.nat({ max: 100_000 }).map(String),
  fc
    .date({ min: new Date('2000-01-01'), max: new Date('2100-01-01'), noInvalidDate: true })
    .map((d) => d.toUTCString()),
  fc.string(),
);

const attemptResult: fc.Arbitrary<AttemptResult> = fc.oneof(
  fc.record(
    { kind: fc.constant('response' as const), status: fc.integer({ min: 100, max: 599 }), retryAfter },
    { requiredKeys: ['kind', 'status'] },
  ),
  fc.record({ kind: fc.constant('error' as const), code: fc.constantFrom(...ERROR_CODES) }),
  fc.record({ kind: fc.constant('guard_refused' as const), rule: fc.constantFrom(...GUARD_RULES) }),
);

const NOW = Date.parse('2026-12-02T12:00:00Z');

describe('classifyAttempt (properties)', () => {
  it('matches the outcome table for every status code, failure and guard rule', () => {
    fc.assert(
      fc.property(attemptResult, (r) => {
        const c = classifyAttempt(r, NOW);
        const want = reference(r);
        expect(c.outcome).toBe(want.outcome);
        expect(c.reason).toBe(want.reason);
        expect(c.jobStatus).toBe(want.job);
        expect(c.configStatus).toBe(want.config);
      }),
      { numRuns: 2000 },
    );
  });

  it('a retry never carries a final job status, and every other outcome does', () => {
    fc.assert(
      fc.property(attemptResult, (r) => {
        const c = classifyAttempt(r, NOW);
        if (c.outcome === 'retry') expect(c.jobStatus).toBeUndefined();
        else expect(FINAL).toContain(c.jobStatus);
      }),
    );
  });

  it('Retry-After is taken only on 429 and 503, and only when it parses, never negative', () => {
    fc.assert(
      fc.property(attemptResult, (r) => {
        const c = classifyAttempt(r, NOW);
        if (r.kind !== 'response' || (r.status !== 429 && r.status !== 503) || r.retryAfter === undefined)
          expect(c.retryAfterMs).toBeUndefined();
        else expect(c.retryAfterMs).toBe(parseRetryAfter(r.retryAfter, NOW));
        if (c.retryAfterMs !== undefined) expect(c.retryAfterMs).toBeGreaterThanOrEqual(0);
      }),
    );
  });

  it('parseRetryAfter never throws, and delay-seconds are read exactly', () => {
    fc.assert(
      fc.property(fc.string(), fc.integer({ min: 0, max: 4_102_444_800_000 }), (v, now) => {
        const ms = parseRetryAfter(v, now);
        if (ms !== undefined) expect(ms).toBeGreaterThanOrEqual(0);
      }),
    );
    fc.assert(
      fc.property(fc.nat({ max: 10_000_000 }), (s) => expect(parseRetryAfter(String(s), NOW)).toBe(s * 1000)),
    );
  });
});
