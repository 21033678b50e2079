import { EventEmitter } from 'node:events';
import type { Response } from 'express';
import type { PgListener } from '../db/listen';

// Not a tenant id (tenant ids match [A-Za-z0-9._~:-]).
const STOP = ' stop';

/**
 * A per-tenant feed's notices (the resolutions, the config events): writers NOTIFY the tenant on the
 * feed's channel at commit (on the process's LISTEN connection), and long-polling readers wake at once.
 * Readers also re-read every `recheckMs` (1 s), so a lost connection only slows them.
 */
export class FeedNotifier {
  private readonly emitter = new EventEmitter();
  private stopped = false;

  constructor(
    private readonly listener: PgListener,
    private readonly channel: string,
    /** How often a long-poll re-reads the feed without a notification. */
    readonly recheckMs = 1000,
  ) {
    this.emitter.setMaxListeners(0);
  }

  async start(): Promise<void> {
    await this.listener.on(this.channel, (tenant) => {
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

/** The api's per-tenant feeds. */
export interface Feeds {
  resolutions: FeedNotifier;
  configEvents: FeedNotifier;
}

/**
 * A long-poll of a tenant's feed (`wait` 0..30 s): reads after the cursor; while the page is empty,
 * waits for the feed's notice (or its re-read) until `wait` has passed, the client has gone, or the
 * process stops; answers the page.
 */
export async function longPoll<T>(
  feed: FeedNotifier,
  tenantId: string,
  waitS: number,
  res: Response,
  read: () => Promise<T[]>,
): Promise<T[]> {
  const until = Date.now() + waitS * 1000;
  const aborted = new AbortController();
  res.once('close', () => aborted.abort());
  let items = await read();
  while (items.length === 0 && Date.now() < until && !aborted.signal.aborted && !feed.stopping) {
    await feed.wait(tenantId, Math.min(feed.recheckMs, until - Date.now()), aborted.signal);
    items = await read();
  }
  return items;
}
