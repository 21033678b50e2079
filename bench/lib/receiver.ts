import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { makeTestTls, type TestTls } from '../../test/helpers/tls';
import { benchIdOf, waitUntil } from './util';

/** What the receiver answers the k-th request (1-based) for one benchmark id. */
export type Script = (id: string, k: number) => number;

export interface BenchReceiver {
  url: string;
  port: number;
  tls: TestTls;
  /** First 2xx arrival time (Date.now()) per benchmark id. */
  delivered: Map<string, number>;
  /** Requests seen per id, whatever the answer. */
  seen: Map<string, number>;
  posts: number;
  /**
   * Every request that carried X-A2A-Push-Sequence, in the order the receiver read them (each whole
   * request, as it was answered): its path (one config each), number, benchmark id and answer.
   */
  sequenced: SequencedArrival[];
  setScript(s: Script): void;
  /** Every answer waits this long after the request was read (0: at once); `reset` sets 0. */
  setDelay(ms: number): void;
  reset(): void;
  waitForAll(ids: Iterable<string>, timeoutMs: number): Promise<void>;
  /** Stops listening and drops every connection (senders see connection refused). */
  down(): Promise<void>;
  up(): Promise<void>;
  close(): Promise<void>;
}

export interface SequencedArrival {
  path: string;
  seq: number;
  id?: string;
  /** X-A2A-Push-Delivery: the delivery job's id. */
  delivery?: string;
  at: number;
  status: number;
}

export interface SequenceCheck {
  /** Configs (request paths) and requests looked at. */
  configs: number;
  requests: number;
  /** Requests whose number the receiver had already seen on that config (a resend). */
  duplicates: number;
  /** Requests, not duplicates, whose number is below one the receiver had already seen on that config. */
  outOfOrder: number;
  /** Numbers from 1 to the highest seen on a config that never arrived (a superseded event, or lost). */
  gaps: number;
}

/**
 * Whether the receiver saw each config's pushes in order, by X-A2A-Push-Sequence: walks the arrivals
 * of the paths `keep` selects in the order they were read, per path.
 */
export function sequenceCheck(
  arrivals: readonly SequencedArrival[],
  keep: (path: string) => boolean,
): SequenceCheck {
  const lines = new Map<string, { max: number; seen: Set<number> }>();
  const c: SequenceCheck = { configs: 0, requests: 0, duplicates: 0, outOfOrder: 0, gaps: 0 };
  for (const a of arrivals) {
    if (!keep(a.path)) continue;
    c.requests++;
    let line = lines.get(a.path);
    if (!line) lines.set(a.path, (line = { max: -Infinity, seen: new Set() }));
    if (line.seen.has(a.seq)) c.duplicates++;
    else if (a.seq < line.max) c.outOfOrder++;
    line.seen.add(a.seq);
    line.max = Math.max(line.max, a.seq);
  }
  c.configs = lines.size;
  for (const line of lines.values()) c.gaps += line.max - line.seen.size;
  return c;
}

/** The local HTTPS push target every sender posts to: counts POSTs and notes when each arrived. */
export async function startBenchReceiver(port = 0): Promise<BenchReceiver> {
  const tls = makeTestTls();
  const delivered = new Map<string, number>();
  const seen = new Map<string, number>();
  const sequenced: SequencedArrival[] = [];
  let script: Script = () => 200;
  let delayMs = 0;
  const sockets = new Set<Socket>();
  const r = {
    url: '',
    port,
    tls,
    delivered,
    seen,
    posts: 0,
    sequenced,
  } as BenchReceiver;

  const handler = (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const at = Date.now();
      r.posts++;
      const id = benchIdOf(Buffer.concat(chunks).toString('utf8'));
      let status = 200;
      if (id !== undefined) {
        const k = (seen.get(id) ?? 0) + 1;
        seen.set(id, k);
        status = script(id, k);
        if (status < 300 && !delivered.has(id)) delivered.set(id, at);
      }
      const seq = Number(req.headers['x-a2a-push-sequence']);
      const delivery = req.headers['x-a2a-push-delivery'];
      if (req.headers['x-a2a-push-sequence'] !== undefined && Number.isFinite(seq))
        sequenced.push({
          path: req.url ?? '',
          seq,
          ...(id !== undefined ? { id } : {}),
          ...(typeof delivery === 'string' ? { delivery } : {}),
          at,
          status,
        });
      const answer = () => {
        res.writeHead(status, { 'content-type': 'text/plain', 'content-length': '2' });
        res.end('ok');
      };
      if (delayMs > 0) setTimeout(answer, delayMs);
      else answer();
    });
  };
  let server: https.Server | undefined;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server = https.createServer({ cert: tls.certPem, key: tls.keyPem, keepAliveTimeout: 30_000 }, handler);
      server.on('connection', (s: Socket) => {
        sockets.add(s);
        s.once('close', () => sockets.delete(s));
      });
      server.once('error', reject);
      server.listen(r.port, '127.0.0.1', () => {
        r.port = (server!.address() as { port: number }).port;
        r.url = `https://127.0.0.1:${r.port}`;
        resolve();
      });
    });
  const stop = () =>
    new Promise<void>((resolve) => {
      if (!server) return resolve();
      server.close(() => resolve());
      for (const s of sockets) s.destroy();
      server = undefined;
    });
  await listen();
  r.setScript = (s) => {
    script = s;
  };
  r.setDelay = (ms) => {
    delayMs = ms;
  };
  r.reset = () => {
    delayMs = 0;
    delivered.clear();
    seen.clear();
    sequenced.length = 0;
    r.posts = 0;
    script = () => 200;
  };
  r.waitForAll = async (ids, timeoutMs) => {
    const want = [...ids];
    let i = 0;
    await waitUntil(
      `${want.length} deliveries`,
      () => {
        while (i < want.length && delivered.has(want[i]!)) i++;
        return i === want.length;
      },
      timeoutMs,
    );
  };
  r.down = stop;
  r.up = listen;
  r.close = stop;
  return r;
}
