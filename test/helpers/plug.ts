/**
 * A TCP pass-through on 127.0.0.1 in front of a real server (Postgres, Temporal), which a test can
 * pull: `cut()` drops every open connection and refuses new ones, so the server is away for whoever
 * connects through the plug, while it keeps serving everyone else; `restore()` lets connections through
 * again.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';

export interface Plug {
  port: number;
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startPlug(host: string, port: number): Promise<Plug> {
  let cut = false;
  const open = new Set<net.Socket>();
  const track = (s: net.Socket) => {
    open.add(s);
    s.once('close', () => open.delete(s));
    s.on('error', () => undefined);
  };
  const server = net.createServer((client) => {
    track(client);
    if (cut) {
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect({ host, port });
    track(upstream);
    client.pipe(upstream).pipe(client);
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    cut() {
      cut = true;
      for (const s of open) s.resetAndDestroy();
    },
    restore() {
      cut = false;
    },
    close() {
      for (const s of open) s.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}
