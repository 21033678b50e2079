import type { GuardRule, OutboundErrorCode } from '../outbound';

/** What one attempt produced: an HTTP answer, or a failure before one arrived. */
export type AttemptResult =
  | { kind: 'response'; status: number; retryAfter?: string }
  | { kind: 'error'; code: Exclude<OutboundErrorCode, 'guard_refused'> }
  | { kind: 'guard_refused'; rule: GuardRule };

export type AttemptOutcome = 'delivered' | 'retry' | 'auth_failed' | 'stopped' | 'failed' | 'guard_refused';
export type FinalJobStatus =
  'delivered' | 'failed' | 'exhausted' | 'expired' | 'cancelled' | 'superseded' | 'auth_failed' | 'stopped';

export interface Classification {
  outcome: AttemptOutcome;
  /** `http_<code>`, `redirect`, `tls`, `timeout`, `connection`, `dns`, `guard_refused:<rule>` */
  reason: string;
  /** The job's final status, absent when the attempt asks for a retry. */
  jobStatus?: FinalJobStatus;
  /** The config's new status, when the attempt changes it. */
  configStatus?: 'auth_failed' | 'stopped';
  /** Milliseconds the receiver asked us to wait (429/503 with Retry-After). */
  retryAfterMs?: number;
}

const RETRY_STATUSES = new Set([429, 502, 503, 504]);

/** The contract's outcome table (section 3), as a pure function. */
export function classifyAttempt(r: AttemptResult, nowMs: number): Classification {
  if (r.kind === 'guard_refused') {
    const reason = `guard_refused:${r.rule}`;
    return { outcome: 'guard_refused', reason, jobStatus: 'stopped', configStatus: 'stopped' };
  }
  if (r.kind === 'error') {
    if (r.code === 'tls') return { outcome: 'failed', reason: 'tls', jobStatus: 'failed' };
    return { outcome: 'retry', reason: r.code };
  }
  const { status } = r;
  const reason = `http_${status}`;
  if (status >= 200 && status < 300) return { outcome: 'delivered', reason, jobStatus: 'delivered' };
  if (RETRY_STATUSES.has(status)) {
    const c: Classification = { outcome: 'retry', reason };
    if ((status === 429 || status === 503) && r.retryAfter !== undefined) {
      const ms = parseRetryAfter(r.retryAfter, nowMs);
      if (ms !== undefined) c.retryAfterMs = ms;
    }
    return c;
  }
  if (status === 401 || status === 403)
    return { outcome: 'auth_failed', reason, jobStatus: 'auth_failed', configStatus: 'auth_failed' };
  if (status === 404 || status === 410)
    return { outcome: 'stopped', reason, jobStatus: 'stopped', configStatus: 'stopped' };
  if (status >= 300 && status < 400) return { outcome: 'failed', reason: 'redirect', jobStatus: 'failed' };
  return { outcome: 'failed', reason, jobStatus: 'failed' };
}

/** Retry-After is delay-seconds or an HTTP date (RFC 9110 §10.2.3); anything else is ignored. */
export function parseRetryAfter(value: string, nowMs: number): number | undefined {
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  if (!/[a-z]/i.test(v)) return undefined;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}
