import { EventEmitter } from 'node:events';
import { Client } from 'pg';
import type { Logger } from 'pino';
import { FEED_CHANNEL } from '../db/registrations';

/**
 * One LISTEN connection per API process: feed writers NOTIFY the tenant at commit, and long-polling
 * readers wake at once. Readers also re-read every `recheckMs` (1 s), so a lost connection only slows
 * them.
 */
// Not a tenant id (tenant ids match [A-Za-z0-9._~:-]).
const STOP = ' stop';

export class FeedNotifier {
  private readonly emitter = new EventEmitter();
  private client: Client | undefined;
  private stopped = false;
  private retry: NodeJS.Timeout | undefined;

  constructor(
    private readonly url: string,
    private readonly logger: Logger,
    /** How often a long-poll re-reads the feed without a notification. */
    readonly recheckMs = 1000,
  ) {
    this.emitter.setMaxListeners(0);
  }

  async start(): Promise<void> {
    if (this.stopped) return;
    const c = new Client({ connectionString: this.url });
    c.on('error', () => this.reconnect());
    c.on('end', () => this.reconnect());
    c.on('notification', (n) => {
      if (n.channel === FEED_CHANNEL && n.payload) this.emitter.emit(n.payload);
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${FEED_CHANNEL}`);
      this.client = c;
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'feed notifier could not listen; retrying');
      this.reconnect();
    }
  }

  private reconnect() {
    this.client = undefined;
    if (this.stopped || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.start();
    }, 1000);
    this.retry.unref();
  }

  /** True once the process is shutting down: long-polls answer what they have. */
  get stopping(): boolean {
    return this.stopped;
  }

  /** Resolves on the tenant's next notification, after ms, or at shutdown. */
  wait(tenantId: string, ms: number, signal?: AbortSignal): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.emitter.off(tenantId, done);
        this.emitter.off(STOP, done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.emitter.on(tenantId, done);
      this.emitter.on(STOP, done);
      signal?.addEventListener('abort', done);
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.emitter.emit(STOP);
    if (this.retry) clearTimeout(this.retry);
    await this.client?.end().catch(() => undefined);
  }
}
