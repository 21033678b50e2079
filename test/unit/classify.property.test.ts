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

// ---- Retry-After, with what each value means worked out here (RFC 9110 §10.2.3), not by the parser

const NOW = Date.parse('2026-12-02T12:00:00Z');
const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) of a whole number of seconds since the epoch. */
function imfFixdate(seconds: number): string {
  let days = Math.floor(seconds / 86_400);
  const rest = seconds - days * 86_400;
  const weekday = DAYS[(days + 4) % 7]!; // 1970-01-01 was a Thursday
  let year = 1970;
  const leap = (y: number) => (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  while (days >= (leap(year) ? 366 : 365)) days -= leap(year++) ? 366 : 365;
  const lengths = [31, leap(year) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  let month = 0;
  while (days >= lengths[month]!) days -= lengths[month++]!;
  const [h, m, s] = [Math.floor(rest / 3600), Math.floor((rest % 3600) / 60), rest % 60];
  return `${weekday}, ${pad(days + 1)} ${MONTHS[month]} ${year} ${pad(h)}:${pad(m)}:${pad(s)} GMT`;
}

/** A Retry-After value and the wait it asks for at NOW (undefined: not a Retry-After value). */
interface RetryAfterCase {
  text: string;
  ms: number | undefined;
}

const ows = fc.constantFrom('', ' ', '\t', '  ');
const retryAfterCase: fc.Arbitrary<RetryAfterCase> = fc.oneof(
  // delay-seconds, with the optional whitespace around a field value
  fc.tuple(ows, fc.nat({ max: 100_000 }), ows).map(([a, n, b]) => ({ text: `${a}${n}${b}`, ms: n * 1000 })),
  // an HTTP date in the past or the future: the wait to it, never negative
  fc
    .integer({
      min: Date.parse('2000-01-01T00:00:00Z') / 1000,
      max: Date.parse('2100-01-01T00:00:00Z') / 1000,
    })
    .map((t) => ({ text: imfFixdate(t), ms: Math.max(0, t * 1000 - NOW) })),
  // neither
  fc
    .constantFrom(
      '',
      '   ',
      'soon',
      'later',
      '-5',
      '+5',
      '1.5',
      '1,5',
      '5 5',
      '12abc',
      '12s',
      '5seconds',
      'Infinity',
      'NaN',
      '1e3',
      '0x10',
      '\uff11\uff12',
      'Mon',
      'GMT',
      'Wed, 32 Dec 2026 12:00:00 GMT',
      'Wed, 02 Foo 2026 12:00:00 GMT',
    )
    .map((text) => ({ text, ms: undefined })),
);

/** An attempt's result, and for an answer with Retry-After what that header means. */
const attemptResult: fc.Arbitrary<AttemptResult & { retryAfterMs?: number | undefined }> = fc.oneof(
  fc
    .record(
      {
        kind: fc.constant('response' as const),
        status: fc.integer({ min: 100, max: 599 }),
        retryAfter: retryAfterCase,
      },
      { requiredKeys: ['kind', 'status'] },
    )
    .map(({ retryAfter, ...r }) =>
      retryAfter ? { ...r, retryAfter: retryAfter.text, retryAfterMs: retryAfter.ms } : r,
    ),
  fc.record({ kind: fc.constant('error' as const), code: fc.constantFrom(...ERROR_CODES) }),
  fc.record({ kind: fc.constant('guard_refused' as const), rule: fc.constantFrom(...GUARD_RULES) }),
);

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
        else expect(c.retryAfterMs).toBe(r.retryAfterMs);
      }),
      { numRuns: 2000 },
    );
  });

  it('parseRetryAfter reads delay-seconds and HTTP dates as the RFC means them, and refuses the rest', () => {
    fc.assert(
      fc.property(retryAfterCase, ({ text, ms }) => expect(parseRetryAfter(text, NOW)).toBe(ms)),
      { numRuns: 2000 },
    );
  });

  it('parseRetryAfter never throws on any string, and never answers a negative wait', () => {
    fc.assert(
      fc.property(fc.string(), fc.integer({ min: 0, max: 4_102_444_800_000 }), (v, now) => {
        const ms = parseRetryAfter(v, now);
        if (ms !== undefined) expect(ms).toBeGreaterThanOrEqual(0);
      }),
    );
  });
});
