import { describePlan, nextStep, retryDelayMs, type RetrySettings } from '../../src/delivery/schedule';

const S: RetrySettings = { initialMs: 30_000, factor: 3, maxMs: 6 * 3_600_000, maxAttempts: 8 };

describe('retry schedule', () => {
  it.each([
    [1, 30_000],
    [2, 90_000],
    [3, 270_000],
    [4, 810_000],
    [5, 2_430_000],
    [6, 7_290_000],
    [7, 21_600_000], // 21 870 s capped at 6 h
  ])('wait after attempt %i is %i ms at the band centre', (n, ms) => {
    expect(retryDelayMs(n, 0.5, S)).toBe(ms);
  });

  it('jitter stays inside ±20 %', () => {
    expect(retryDelayMs(1, 0, S)).toBe(24_000);
    expect(retryDelayMs(1, 0.999999, S)).toBeLessThanOrEqual(36_000);
    expect(retryDelayMs(1, 0.999999, S)).toBeGreaterThan(35_999);
  });

  it('Retry-After lengthens the wait but never past RETRY_MAX', () => {
    expect(retryDelayMs(1, 0.5, S, 120_000)).toBe(120_000);
    expect(retryDelayMs(3, 0.5, S, 1_000)).toBe(270_000);
    expect(retryDelayMs(1, 0.5, S, 48 * 3_600_000)).toBe(S.maxMs);
  });

  it('no wait follows the last attempt', () => {
    expect(nextStep(8, 0, Number.MAX_SAFE_INTEGER, 0.5, S)).toEqual({ kind: 'exhausted' });
    expect(nextStep(7, 0, Number.MAX_SAFE_INTEGER, 0.5, S)).toEqual({ kind: 'wait', waitMs: 21_600_000 });
  });

  it('a wait that would pass the deadline expires the job instead', () => {
    expect(nextStep(1, 1_000, 1_000 + 29_999, 0.5, S)).toEqual({ kind: 'expired' });
    expect(nextStep(1, 1_000, 1_000 + 30_000, 0.5, S)).toEqual({ kind: 'wait', waitMs: 30_000 });
  });
});

it('describes the default attempt plan in words for the Web UI', () => {
  expect(describePlan({ ...S, timeoutMs: 15_000, deadlineMs: 86_400_000 })).toBe(
    'up to 8 attempts of at most 15 s each; waits 30 s × 3^(n−1) ± 20 % (at most 6 h, longer on Retry-After); deadline 24 h after the event',
  );
});
