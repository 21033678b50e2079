import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { makeTestTls } from '../../test/helpers/tls';
import { benchIdOf } from './util';

/**
 * How a target behaves: `hole` accepts the connection, completes the TLS handshake, reads the request
 * and never answers; `slow` answers 200 after `delayMs`; `ok` answers 200 at once.
 */
export type TargetMode = { kind: 'hole' } | { kind: 'slow'; delayMs: number } | { kind: 'ok' };

export interface BenchTargets {
  /** One base URL per host (`https://127.0.1.x:port`), in the order of `hosts`. */
  urls: string[];
  /** Arrival time (Date.now()) of every request any of the hosts received, whatever it was answered. */
  arrivals: number[];
  /** First 200 per benchmark id (Date.now()). */
  delivered: Map<string, number>;
  /** Called when a request is answered 200 (after the delay in `slow` mode), with its id and path. */
  onAnswered?: (id: string, path: string) => void;
  setMode(m: TargetMode): void;
  /** Stops listening, cancels pending answers and destroys every socket (held requests included). */
  close(): Promise<void>;
}

/**
 * HTTPS targets on the given loopback addresses (127.0.0.0/8 is all loopback on Linux), one server per
 * address, so that each is a distinct host to the sender. Their certificate names every address and is
 * signed by the same throwaway CA as the bench receiver's (test/helpers/tls caches it per process), so
 * the receiver's `caFile` lets the service trust them too.
 */
export async function startTargets(hosts: string[], initial: TargetMode): Promise<BenchTargets> {
  const tls = makeTestTls({ names: hosts });
  let mode = initial;
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const servers: https.Server[] = [];
  const t: BenchTargets = {
    urls: [],
    arrivals: [],
    delivered: new Map(),
    setMode: (m) => {
      mode = m;
    },
    close: async () => {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      for (const s of sockets) s.destroy();
      await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    },
  };

  const answer = (req: IncomingMessage, res: ServerResponse, body: string) => {
    if (res.destroyed || res.socket?.destroyed) return;
    const id = benchIdOf(body);
    if (id !== undefined && !t.delivered.has(id)) t.delivered.set(id, Date.now());
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' });
    res.end('ok');
    if (id !== undefined) t.onAnswered?.(id, req.url ?? '');
  };

  const handler = (req: IncomingMessage, res: ServerResponse) => {
    t.arrivals.push(Date.now());
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      // The mode when the request arrived decides: a request held by the hole stays unanswered after
      // the host recovers (the sender's own timeout ends it), as a real host that comes back would.
      const m = mode;
      if (m.kind === 'hole') return;
      if (m.kind === 'ok') return answer(req, res, body);
      const timer = setTimeout(() => {
        timers.delete(timer);
        answer(req, res, body);
      }, m.delayMs);
      timers.add(timer);
    });
  };

  for (const host of hosts) {
    // No request or header timeout of its own: the hole keeps every request until the bench ends.
    const server = https.createServer(
      { cert: tls.certPem, key: tls.keyPem, requestTimeout: 0, headersTimeout: 0, keepAliveTimeout: 30_000 },
      handler,
    );
    server.on('connection', (s: Socket) => {
      sockets.add(s);
      s.once('close', () => sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, host, () => resolve());
    });
    servers.push(server);
    t.urls.push(`https://${host}:${(server.address() as { port: number }).port}`);
  }
  return t;
}
