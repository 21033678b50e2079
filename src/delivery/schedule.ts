export interface RetrySettings {
  initialMs: number;
  factor: number;
  maxMs: number;
  maxAttempts: number;
}

/**
 * Wait before attempt n+1 after attempt n (n ≥ 1):
 * d = min(max, initial × factor^(n−1)) × U(0.8, 1.2); with Retry-After r: max(d, min(r, max)).
 * `jitter` is a sample of the workflow's deterministic random in [0, 1).
 */
export function retryDelayMs(n: number, jitter: number, s: RetrySettings, retryAfterMs?: number): number {
  const base = Math.min(s.maxMs, s.initialMs * Math.pow(s.factor, n - 1));
  const d = Math.round(base * (0.8 + 0.4 * jitter));
  return retryAfterMs === undefined ? d : Math.max(d, Math.min(retryAfterMs, s.maxMs));
}

export type NextStep = { kind: 'wait'; waitMs: number } | { kind: 'exhausted' } | { kind: 'expired' };

/** After a retryable attempt n: wait, or give up because the attempts or the deadline are used up. */
export function nextStep(
  n: number,
  nowMs: number,
  deadlineMs: number,
  jitter: number,
  s: RetrySettings,
  retryAfterMs?: number,
): NextStep {
  if (n >= s.maxAttempts) return { kind: 'exhausted' };
  const waitMs = retryDelayMs(n, jitter, s, retryAfterMs);
  if (nowMs + waitMs > deadlineMs) return { kind: 'expired' };
  return { kind: 'wait', waitMs };
}

const secs = (ms: number) =>
  ms % 3_600_000 === 0 ? `${ms / 3_600_000} h` : ms % 60_000 === 0 ? `${ms / 60_000} min` : `${ms / 1000} s`;

/** The attempt plan in words, for the workflow's static details in the Web UI. */
export function describePlan(s: RetrySettings & { timeoutMs: number; deadlineMs: number }): string {
  return (
    `up to ${s.maxAttempts} attempts of at most ${secs(s.timeoutMs)} each; waits ${secs(s.initialMs)} × ${s.factor}^(n−1) ` +
    `± 20 % (at most ${secs(s.maxMs)}, longer on Retry-After); deadline ${secs(s.deadlineMs)} after the event`
  );
}

/** The attempt plan of the service's settings: the same words wherever a delivery workflow starts. */
export function attemptPlanOf(s: {
  RETRY_INITIAL: number;
  RETRY_FACTOR: number;
  RETRY_MAX: number;
  DELIVERY_MAX_ATTEMPTS: number;
  DELIVERY_TIMEOUT: number;
  DELIVERY_DEADLINE: number;
}): string {
  return describePlan({
    initialMs: s.RETRY_INITIAL,
    factor: s.RETRY_FACTOR,
    maxMs: s.RETRY_MAX,
    maxAttempts: s.DELIVERY_MAX_ATTEMPTS,
    timeoutMs: s.DELIVERY_TIMEOUT,
    deadlineMs: s.DELIVERY_DEADLINE,
  });
}
