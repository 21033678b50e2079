import type { AttemptResult, Classification } from './classify';
import type { JobStatus } from './types';

/**
 * Health, pure: of a config (contract §10: which job ends count against it; the rule itself is
 * outbox_config_health's, migrations 021 and 022) and of a target (what one call tells of it, for the slow lane).
 */

/** Ended without a 2xx after at least one attempt: the jobs config health looks at. */
export const endedUndelivered = (status: JobStatus, attempts: number): boolean =>
  ['failed', 'exhausted', 'expired'].includes(status) || (status === 'superseded' && attempts > 0);

/**
 * The rule's two durations (workflow time): CONFIG_FAILING_AFTER, after which a config without a 2xx
 * stops as `failing`; CONFIG_WARN_AFTER, after which a failing stretch gets its `failing` warning.
 */
export interface HealthRule {
  failingAfterMs: number;
  warnAfterMs: number;
}

/** 'healthy' (a 2xx) clears a target's slow-lane mark; 'suspect' sets it; 'neutral' leaves it. */
export type CallHealth = 'healthy' | 'suspect' | 'neutral';

/**
 * What a call tells of its target: one that timed out, could not connect, or took more than half its
 * time marks it for the slow lane; a 2xx clears the mark (however long it took).
 */
export function callHealth(
  result: AttemptResult,
  c: Pick<Classification, 'outcome'>,
  durationMs: number,
  timeoutMs: number,
): CallHealth {
  if (result.kind === 'error' && ['timeout', 'connection', 'dns'].includes(result.code)) return 'suspect';
  if (c.outcome === 'delivered') return 'healthy';
  return durationMs > timeoutMs / 2 ? 'suspect' : 'neutral';
}
