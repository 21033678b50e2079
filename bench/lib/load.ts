import autocannon from 'autocannon';
import { round } from './util';

export interface LoadResult {
  /** 2xx answers per second over the run: a refused or failed request is not throughput. */
  rps: number;
  /** Latency percentiles of the 2xx answers (autocannon's excludeErrorStats). */
  p50: number;
  p99: number;
  /** Every answer, whatever its status. */
  requests: number;
  ok2xx: number;
  non2xx: number;
  /** Connection errors, timeouts among them. */
  errors: number;
  timeouts: number;
  durationS: number;
}

/** Answers that were not a success: non-2xx statuses and connection errors. */
export const failedAnswers = (r: LoadResult) => r.non2xx + r.errors;

/**
 * autocannon at `connections` concurrent clients for `durationS`; `next()` makes each request (its path,
 * headers and body), so the load spreads over many tasks or registrations.
 */
export async function load(o: {
  url: string;
  connections: number;
  durationS: number;
  next: () => { path: string; headers: Record<string, string>; body: string };
}): Promise<LoadResult> {
  const r = await autocannon({
    url: o.url,
    connections: o.connections,
    duration: o.durationS,
    method: 'POST',
    excludeErrorStats: true,
    requests: [
      {
        setupRequest: (req) => {
          const x = o.next();
          return { ...req, method: 'POST', path: x.path, headers: x.headers, body: x.body };
        },
      },
    ],
  });
  return {
    rps: round(r['2xx'] / r.duration),
    p50: r.latency.p50,
    p99: r.latency.p99,
    requests: r.requests.total,
    ok2xx: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    durationS: r.duration,
  };
}
