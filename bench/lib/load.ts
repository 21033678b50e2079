import autocannon from 'autocannon';
import { round } from './util';

export interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  non2xx: number;
  errors: number;
}

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
    rps: round(r.requests.average),
    p50: r.latency.p50,
    p99: r.latency.p99,
    requests: r.requests.total,
    non2xx: r.non2xx,
    errors: r.errors,
  };
}
