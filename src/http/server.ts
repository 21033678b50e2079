import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** The listener plumbing every role shares: listen, keep-alive-aware close. */

export const listen = (server: http.Server, port: number) =>
  new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '0.0.0.0', () => resolve((server.address() as AddressInfo).port));
  });
const closing = new WeakSet<http.Server>();
const openResponses = new WeakMap<http.Server, Set<http.ServerResponse>>();

/**
 * Tracks a listener's open responses so that a shutdown can end keep-alive connections: without it a
 * client that keeps reusing one connection would keep the server (and the process) alive.
 */
export function trackConnections<S extends http.Server>(server: S): S {
  const open = new Set<http.ServerResponse>();
  openResponses.set(server, open);
  // Prepended, so it runs before the app answers.
  server.prependListener('request', (_req: http.IncomingMessage, res: http.ServerResponse) => {
    if (closing.has(server)) res.setHeader('Connection', 'close');
    open.add(res);
    res.once('close', () => open.delete(res));
  });
  return server;
}

/** Stops accepting, lets in-flight requests finish (each then closes its connection), closes idle sockets. */
export const closeServer = (server: http.Server) =>
  new Promise<void>((resolve) => {
    closing.add(server);
    for (const res of openResponses.get(server) ?? [])
      if (!res.headersSent) res.setHeader('Connection', 'close');
    server.close(() => resolve());
    server.closeIdleConnections();
    // Responses in flight now answer with Connection: close, then their sockets go idle and close.
    const sweep = setInterval(() => server.closeIdleConnections(), 100);
    server.once('close', () => clearInterval(sweep));
  });
