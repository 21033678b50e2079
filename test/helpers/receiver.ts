/**
 * A scripted local HTTPS receiver: records every request and answers what the test's script says,
 * including answers that misbehave (reset, hang, stall mid-body).
 */
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { makeTestTls, type TestTls } from './tls';

export interface ReceivedRequest {
  n: number;
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  at: number;
  remoteAddress: string;
  localAddress: string;
  /** The TLS SNI name the client sent (false when it sent none, as for IP-literal URLs). */
  servername: string | false;
}

export type ScriptedAnswer =
  | {
      status: number;
      headers?: Record<string, string>;
      body?: string;
      /** wait before answering */
      delayMs?: number;
      /** answer once this settles (the test holds the request on the wire until it says so) */
      gate?: Promise<unknown>;
      /** send the headers and `body`, then never finish the response */
      stall?: boolean;
      /** send the headers and `body`, then one more byte every this many ms, never finishing */
      trickleMs?: number;
    }
  | { destroy: true }
  | { hang: true };

export interface Receiver {
  url: string;
  port: number;
  host: string;
  requests: ReceivedRequest[];
  /** TCP connections accepted (counted before TLS, so a refused handshake still counts) */
  connections: number;
  setScript(fn: (req: ReceivedRequest) => ScriptedAnswer): void;
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  close(): Promise<void>;
}

const ok = (): ScriptedAnswer => ({ status: 200, headers: { 'content-type': 'text/plain' }, body: 'ok' });

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

export async function startReceiver(
  opts: {
    host?: string;
    port?: number;
    path?: string;
    script?: (req: ReceivedRequest) => ScriptedAnswer;
    tls?: TestTls;
  } = {},
): Promise<Receiver> {
  const host = opts.host ?? '127.0.0.1';
  const tls = opts.tls ?? makeTestTls();
  let script = opts.script ?? ok;
  const requests: ReceivedRequest[] = [];
  const sockets = new Set<Socket>();
  const rawSockets = new Map<string, Socket>();
  const waiters = new Set<() => void>();
  const timers = new Set<NodeJS.Timeout>();
  let connections = 0;

  const answer = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const body = await readBody(req);
    const socket = req.socket as TLSSocket;
    const received: ReceivedRequest = {
      n: requests.length + 1,
      method: req.method ?? '',
      path: req.url ?? '',
      headers: req.headers,
      body,
      at: Date.now(),
      remoteAddress: socket.remoteAddress ?? '',
      localAddress: socket.localAddress ?? '',
      servername: socket.servername ?? false,
    };
    requests.push(received);
    for (const wake of [...waiters]) wake();
    const a = script(received);
    if ('hang' in a) return;
    if ('destroy' in a) {
      // A TLS socket cannot send a TCP RST itself; its underlying TCP socket can.
      const raw = rawSockets.get(`${socket.remoteAddress}:${socket.remotePort}`);
      if (raw) raw.resetAndDestroy();
      else socket.destroy();
      return;
    }
    if (a.delayMs) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          timers.delete(t);
          resolve();
        }, a.delayMs);
        timers.add(t);
      });
    }
    if (a.gate) await a.gate.catch(() => undefined);
    if (res.destroyed) return;
    res.writeHead(a.status, a.headers);
    if (a.stall || a.trickleMs) {
      res.flushHeaders();
      if (a.body) res.write(a.body);
      if (a.trickleMs) {
        const t = setInterval(() => res.write('.'), a.trickleMs);
        timers.add(t);
        res.once('close', () => {
          clearInterval(t);
          timers.delete(t);
        });
      }
      return;
    }
    res.end(a.body);
  };

  const server: Server = createServer({ cert: tls.certPem, key: tls.keyPem }, (req, res) => {
    answer(req, res).catch(() => res.destroy());
  });
  server.on('connection', (socket: Socket) => {
    connections += 1;
    sockets.add(socket);
    const key = `${socket.remoteAddress}:${socket.remotePort}`;
    rawSockets.set(key, socket);
    socket.on('close', () => {
      sockets.delete(socket);
      rawSockets.delete(key);
    });
  });
  // A client that rejects our certificate aborts the handshake; that is the test's point, not an error.
  server.on('tlsClientError', () => undefined);

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('receiver: no TCP address');
  const port = address.port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  return {
    url: `https://${urlHost}:${port}${opts.path ?? '/hook'}`,
    port,
    host,
    requests,
    get connections() {
      return connections;
    },
    setScript(fn) {
      script = fn;
    },
    waitFor(count, timeoutMs = 5000) {
      if (requests.length >= count) return Promise.resolve(requests.slice());
      return new Promise((resolve, reject) => {
        const wake = (): void => {
          if (requests.length < count) return;
          clearTimeout(timer);
          waiters.delete(wake);
          resolve(requests.slice());
        };
        const timer = setTimeout(() => {
          waiters.delete(wake);
          reject(new Error(`receiver: ${requests.length} of ${count} requests after ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(wake);
      });
    },
    close() {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Hanging and stalled answers keep sockets open; close() must not wait for them.
        for (const s of sockets) s.destroy();
      });
    },
  };
}
