import type { JobStatus } from './types';
import { isFinished } from './types';

/**
 * Ordered delivery (DELIVERY_ORDER=per_config, contract §10): a config's jobs form a line in the order
 * their events were committed (`seq`). A job's first attempt waits until every earlier job of the line
 * has ended: a final status and no attempt of it still on the wire (a job superseded or cancelled
 * mid-request ends when that attempt returns). The rule, pure; the statements that keep it are
 * migration 020's (a job is written not due behind an unended one, and the end of the one ahead makes
 * it due), checked against it by test/integration/line.property.test.ts.
 */
export interface LineJob {
  id: string;
  /** Position in the config's line: delivery_jobs.seq (commit order per config). */
  seq: bigint;
  status: JobStatus;
  /** An attempt of this job is on the wire (started, no outcome yet). */
  openAttempt: boolean;
  /** When it waits for a retry: its next attempt's time (ms). */
  nextAttemptAt?: number;
}

/** Whether `j` still holds later jobs of its line back. */
export const holdsLine = (j: Pick<LineJob, 'status' | 'openAttempt'>): boolean =>
  !isFinished(j.status) || j.openAttempt;

/**
 * The job that holds `seq` back: the nearest earlier job of the line that has not ended, or undefined
 * when `seq` may make its first attempt. `line` may hold any jobs of the config (earlier, later, ended).
 */
export function heldBy(seq: bigint, line: readonly LineJob[]): LineJob | undefined {
  let ahead: LineJob | undefined;
  for (const j of line)
    if (j.seq < seq && holdsLine(j) && (ahead === undefined || j.seq > ahead.seq)) ahead = j;
  return ahead;
}
