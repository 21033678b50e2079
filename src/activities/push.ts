import type { AttemptContext } from '../db/attempts';
import type { HostSlots } from '../db/slots';
import type { AttemptResult } from '../delivery/classify';
import { OutboundError, type OutboundClient } from '../outbound';
import { USER_AGENT } from '../version';

/** Pushes read at most this much of the answer: its body is ignored. */
export const PUSH_RESPONSE_CAP = 64 * 1024;

/** The headers of a push (contract §3): never the config's `token`, never X-A2A-Notification-Token. */
export function pushHeaders(
  jobId: string,
  ctx: Pick<AttemptContext, 'push_seq'>,
  credential: string | undefined,
): Record<string, string> {
  const headers: Record<string, string> = {
    'content-type': 'application/a2a+json',
    'a2a-version': '1.0',
    'user-agent': USER_AGENT,
    'x-a2a-push-delivery': jobId,
  };
  // The event's number in its config's line: a receiver orders by it, drops repeats, sees gaps.
  if (ctx.push_seq !== null) headers['x-a2a-push-sequence'] = ctx.push_seq;
  if (credential !== undefined) headers.authorization = `Bearer ${credential}`;
  return headers;
}

/**
 * One POST of the event's body to the config's URL, holding the attempt's host slot (its lease renewed
 * while the request runs): an answer, or the transport error it ended with. A cancelled activity
 * (Temporal cancelled it: timed out, its run evicted after a rerun took over, the worker shutting down)
 * stops its request and throws: nothing is recorded, and the attempt's rerun finds it `interrupted`.
 */
export async function pushOnce(
  d: { http: OutboundClient; slots: HostSlots; timeoutMs: number },
  a: {
    jobId: string;
    ctx: Pick<AttemptContext, 'push_seq' | 'url' | 'body'>;
    credential: string | undefined;
    target: string;
    holder: string;
  },
  signal: AbortSignal | undefined,
): Promise<AttemptResult> {
  return d.slots.holding(a.target, a.holder, async () => {
    try {
      const res = await d.http.request({
        method: 'POST',
        url: a.ctx.url,
        headers: pushHeaders(a.jobId, a.ctx, a.credential),
        body: a.ctx.body,
        timeoutMs: d.timeoutMs,
        maxResponseBytes: PUSH_RESPONSE_CAP,
        ...(signal ? { signal } : {}),
      });
      const ra = res.headers['retry-after'];
      return { kind: 'response', status: res.status, ...(typeof ra === 'string' ? { retryAfter: ra } : {}) };
    } catch (err) {
      if (!(err instanceof OutboundError)) throw err;
      return err.code === 'guard_refused'
        ? { kind: 'guard_refused', rule: err.rule! }
        : { kind: 'error', code: err.code };
    }
  });
}
