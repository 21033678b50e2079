import type { JobStatus } from './types';
import { isFinished } from './types';

/**
 * Ordered delivery (DELIVERY_ORDER=per_config, contract §10): a config's jobs form a line in the order
 * their events were committed (`seq`). A job's first attempt waits until every earlier job of the line
 * has ended: a final status and no attempt of it still on the wire (a job superseded or cancelled
 * mid-request ends when that attempt returns).
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

/** Who to wake when the job at `seq` has ended: the first later job of the line that has not ended. */
export function nextInLine<J extends LineJob>(seq: bigint, line: readonly J[]): J | undefined {
  let next: J | undefined;
  for (const j of line)
    if (j.seq > seq && !isFinished(j.status) && (next === undefined || j.seq < next.seq)) next = j;
  return next;
}

/** How soon a job held back by `ahead` asks again if no wake came (a wake lost to a crash). */
export function recheckMs(
  ahead: LineJob,
  line: readonly LineJob[],
  nowMs: number,
  r: { onWireMs: number; idleMs: number },
): number {
  // The one ahead is on the wire: it ends within DELIVERY_TIMEOUT.
  if (ahead.openAttempt || ahead.status === 'in_flight') return r.onWireMs;
  // Nothing ends before the line's head makes its next attempt: no reason to ask before then.
  const headWait = Math.max(0, ...line.map((j) => (j.nextAttemptAt ?? nowMs) - nowMs));
  return Math.max(r.idleMs, headWait + r.onWireMs);
}
