import { Client } from 'pg';
import type { Logger } from 'pino';

/**
 * One LISTEN connection per process, shared by whatever in it waits for a NOTIFY: the resolutions
 * feed's long-polls (`a2a_push_feed`) and the relay's claim runs (`a2a_push_due`). It connects when
 * the first handler is added and comes back 1 s after the connection is lost, calling every handler
 * once with an empty payload then (what was sent meanwhile is lost); every reader also has a timer of
 * its own, so a lost connection only slows it.
 */
export class PgListener {
  private readonly handlers = new Map<string, Set<(payload: string) => void>>();
  private client: Client | undefined;
  private connecting: Promise<void> | undefined;
  private stopped = false;
  private retry: NodeJS.Timeout | undefined;
  /** The connection was lost since it last listened. */
  private lost = false;

  constructor(
    private readonly url: string,
    private readonly logger: Logger,
  ) {}

  /**
   * Calls `fn` with each notification's payload on `channel` (a fixed name: it is not quoted), and with
   * '' after a lost connection is back.
   */
  async on(channel: string, fn: (payload: string) => void): Promise<void> {
    const known = this.handlers.get(channel);
    if (known) {
      known.add(fn);
      return;
    }
    this.handlers.set(channel, new Set([fn]));
    if (this.client) await this.client.query(`LISTEN ${channel}`).catch(() => this.reconnect());
    else await this.connect();
  }

  private connect(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    this.connecting ??= (async () => {
      const c = new Client({ connectionString: this.url });
      c.on('error', () => this.reconnect());
      c.on('end', () => this.reconnect());
      c.on('notification', (n) => {
        for (const fn of this.handlers.get(n.channel) ?? []) fn(n.payload ?? '');
      });
      try {
        await c.connect();
        for (const channel of this.handlers.keys()) await c.query(`LISTEN ${channel}`);
        const again = this.lost;
        this.client = c;
        this.lost = false;
        // Notifications sent while the connection was away are lost: every handler is called once
        // with an empty payload ("look again").
        if (again) for (const fns of this.handlers.values()) for (const fn of fns) fn('');
      } catch (err) {
        this.logger.warn({ err: (err as Error).message }, 'LISTEN connection failed; retrying');
        await c.end().catch(() => undefined);
        this.reconnect();
      } finally {
        this.connecting = undefined;
      }
    })();
    return this.connecting;
  }

  private reconnect() {
    this.client = undefined;
    this.lost = true;
    if (this.stopped || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.connect();
    }, 1000);
    this.retry.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retry) clearTimeout(this.retry);
    await this.connecting;
    await this.client?.end().catch(() => undefined);
  }
}
