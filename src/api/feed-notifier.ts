import { EventEmitter } from 'node:events';
import type { PgListener } from '../db/listen';
import { FEED_CHANNEL } from '../db/registrations';

// Not a tenant id (tenant ids match [A-Za-z0-9._~:-]).
const STOP = ' stop';

/**
 * Feed writers NOTIFY the tenant at commit (on the process's LISTEN connection), and long-polling
 * readers wake at once. Readers also re-read every `recheckMs` (1 s), so a lost connection only slows
 * them.
 */
export class FeedNotifier {
  private readonly emitter = new EventEmitter();
  private stopped = false;

  constructor(
    private readonly listener: PgListener,
    /** How often a long-poll re-reads the feed without a notification. */
    readonly recheckMs = 1000,
  ) {
    this.emitter.setMaxListeners(0);
  }

  async start(): Promise<void> {
    await this.listener.on(FEED_CHANNEL, (tenant) => {
      if (tenant) this.emitter.emit(tenant);
    });
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

  /** Long-polls answer what they have. */
  stop(): void {
    this.stopped = true;
    this.emitter.emit(STOP);
  }
}
