import { isUuid } from '../ids';
import express, { type Request, type Response } from 'express';
import { DatabaseError } from 'pg';
import { LRUCache } from 'lru-cache';
import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { errorHandler, requestLogger } from '../http/middleware';
import { opsRoutes, type Probe } from '../http/ops';
import { charsetRefusal, isJsonMediaType, notUtf8Problem, rawBody, utf8Text } from '../http/body';
import { Problem, sendProblem } from '../http/problem';
import type { Settings } from '../config';
import type { Db } from '../db/pool';
import { inboxRequests } from '../metrics';
import { sameCallbackHash, verifyCallbackCredential } from '../sealing/callback';
import { validateStreamResponse } from '../stream-response';
import { signalRegistration } from '../starts/client';
import { currentTraceparent, inSpan } from '../tracing';
import { GroupCommit } from './group-commit';

export interface InboxDeps {
  db: Db;
  settings: Settings;
  logger: Logger;
  temporal: Client;
}

/** What a stored callback's signal needs: read back from the registration row by the store itself. */
interface Target {
  id: string;
  tenant_id: string;
  agent_url: string;
  remote_task_id: string | null;
  /** Unprocessed callbacks of the registration with this one: 1 means it is the first. */
  inbox_pending: number;
}

/**
 * A registration's callback credential hash as last read, so that a valid callback costs one statement
 * (the store) instead of a lookup and the store. Only a match is taken from it: the store re-checks the
 * hash in the same statement that takes the slot, so a credential replaced since (a repeated embedded
 * registration, a retried separate-mode setup) stores nothing and answers 401; a mismatch against the
 * cache always asks the database, so a new credential is never refused for a stale entry. An entry
 * lives 30 s: within that, a replaced credential with a malformed body may get the body's 4xx instead of
 * the 401 (nothing is stored either way). `ended` is set once the registration is resolved, failed or
 * deleted, which is final.
 */
interface CachedCredential {
  hash: Buffer;
  ended: boolean;
}

const ENDED = new Set(['resolved', 'failed', 'deleted']);

/** A valid callback on its way to the store. */
interface Callback {
  registrationId: string;
  /** The credential hash it matched: the store checks the registration still has it. */
  hash: Buffer;
  taskId: string | null;
  kind: string;
  body: string;
  /** Its request's span (tracing on): stored, so that the reconcile covering it can link to it. */
  traceparent: string | null;
}

/**
 * Store statements running at once per inbox process. Bench 4 on 2 cores: 1 and 2 gave the same
 * throughput (2,886 and 2,877 callbacks/s), 4 less (2,307: smaller batches, more commits). Two keep
 * Postgres busy across the round trip when it is on another machine.
 */
export const STORE_WRITES_IN_FLIGHT = 2;
/** Callbacks per store statement at most. */
export const STORE_BATCH_MAX = 64;
/**
 * Callbacks waiting for a store statement at most; beyond it the inbox answers 503 with Retry-After
 * (nothing stored) instead of holding ever more requests open while Postgres lags or a lock is held.
 */
const STORE_QUEUE_MAX = 4_096;
/** SQLSTATE lock_not_available: the store waited longer than its lock_timeout for a registration row. */
const LOCK_NOT_AVAILABLE = '55P03';

/** The coalescer's time: the wall clock and timers, or a test's own clock. */
export interface CoalescerClock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const realClock: CoalescerClock = {
  now: () => Date.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

/**
 * Coalesces workflow signals per registration. `signal` is for a registration's first unprocessed
 * callback: it goes out at once, unless one is in flight, in which case newer callbacks only mark the
 * registration dirty and one more signal follows when it returns, no sooner than `minIntervalMs` after
 * the previous one began. `remind` is for a callback queued behind others not yet processed: the
 * workflow drains those itself (it reconciles again while callbacks remain), so it signals only when
 * this process has not signalled that registration successfully within `refreshMs` — which repairs a
 * lost signal or a GetTask that failed — and a stream of callbacks costs the Temporal server one
 * signal per registration per `refreshMs`, not one per callback. Polling repairs whatever is left.
 */
export class SignalCoalescer<T extends { id: string }> {
  private readonly state = new Map<string, { dirty: boolean }>();
  /** When this process last signalled each registration successfully (by `clock.now()`). */
  private readonly recent = new LRUCache<string, number>({ max: 100_000 });
  constructor(
    private readonly send: (t: T) => Promise<void>,
    private readonly minIntervalMs = 1_000,
    private readonly refreshMs = 10_000,
    private readonly clock: CoalescerClock = realClock,
  ) {}
  inFlight(): number {
    return this.state.size;
  }
  remind(t: T): void {
    const last = this.recent.get(t.id);
    if (last === undefined || this.clock.now() - last >= this.refreshMs) this.signal(t);
  }
  signal(t: T): void {
    const s = this.state.get(t.id);
    if (s) {
      s.dirty = true;
      return;
    }
    const entry = { dirty: false };
    this.state.set(t.id, entry);
    const loop = async () => {
      for (;;) {
        entry.dirty = false;
        const began = this.clock.now();
        await this.send(t).then(
          () => this.recent.set(t.id, this.clock.now()),
          () => this.recent.delete(t.id),
        );
        if (!entry.dirty) break;
        const wait = this.minIntervalMs - (this.clock.now() - began);
        if (wait > 0) await this.clock.sleep(wait);
      }
      this.state.delete(t.id);
    };
    void loop();
  }
}

/**
 * A string Postgres text can hold: each lone surrogate (valid JSON as an escape, `\ud800`, but no
 * character) becomes U+FFFD. Said here rather than left to the driver's encoder, which does the same
 * silently. Only the recorded task id needs it: the body is stored as received, escape included.
 */
const wellFormed = (s: string) => s.replace(/\p{Cs}/gu, '\uFFFD');

/** A late callback (resolved, failed or deleted registration) is answered 200 and only counted. */
const countLate = (db: Pick<Db, 'query'>, id: string) =>
  db.query(
    'UPDATE registrations SET callbacks_late = callbacks_late + 1, callbacks_received = callbacks_received + 1 WHERE id = $1',
    [id],
  );

export function createInboxApp(deps: InboxDeps, registry: Registry, ready: Probe) {
  const { db, settings } = deps;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  // An agent's traceparent is untrusted: a callback starts a trace of its own and only links to it.
  app.use(requestLogger(deps, 'link'));
  app.use(opsRoutes(registry, ready));
  // Every answer of the callback route is counted once, here, whatever produced it (413 and 5xx too).
  app.use('/a2a/push', (_req, res, next) => {
    res.once('finish', () =>
      inboxRequests.inc({
        status: String(res.statusCode),
        reason: (res.locals.reason as string | undefined) ?? 'other',
      }),
    );
    next();
  });

  const coalescer = new SignalCoalescer<Target>(async (t) => {
    await signalRegistration(deps.temporal, settings.TASK_QUEUE, t);
  });

  const answer = (res: Response, p: Problem, reason: string) => {
    res.locals.reason = reason;
    sendProblem(res, p);
  };

  const refuse = (res: Response) => {
    res.setHeader('WWW-Authenticate', 'Bearer realm="a2a-push-inbox"');
    res.setHeader('Connection', 'close');
    answer(res, new Problem('unauthorized', 'a valid callback credential is required'), 'unauthorized');
  };

  const credentials = new LRUCache<string, CachedCredential>({ max: 10_000, ttl: 30_000 });

  const storer = new GroupCommit<Callback, Target | null>(
    async (items) => {
      // One span per store statement, in the trace of the callback that opened the batch and linked to
      // every callback it stores (a batch joins callbacks of many traces).
      const stored = await inSpan(
        'inbox store',
        {
          attributes: { 'db.system': 'postgresql', 'a2a_push.callbacks': items.length },
          links: items.map((c) => c.traceparent),
        },
        () =>
          db.query<Target & { ord: number }>(
            'SELECT ord, id, tenant_id, agent_url, remote_task_id, inbox_pending FROM inbox_store($1, $2, $3, $4, $5, $6, $7, $8)',
            [
              items.map((c) => c.registrationId),
              items.map((c) => c.hash),
              items.map((c) => c.taskId),
              items.map((c) => c.kind),
              items.map((c) => c.body),
              settings.INBOX_BOUND_PER_REGISTRATION,
              settings.INBOX_BOUND_TOTAL,
              items.map((c) => c.traceparent),
            ],
          ),
      );
      const targets: Array<Target | null> = items.map(() => null);
      for (const { ord, ...target } of stored.rows) targets[ord - 1] = target;
      return targets;
    },
    STORE_WRITES_IN_FLIGHT,
    STORE_BATCH_MAX,
    (err) => err instanceof DatabaseError,
  );

  // Authentication first, before any of the body is read: unknown registration, wrong credential and a
  // resolved registration's wrong credential all look the same.
  const authenticate = (req: Request, res: Response, next: (err?: unknown) => void) => {
    const id = String(req.params.registrationId);
    const h = req.headers.authorization;
    const m = typeof h === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
    const cached = credentials.get(id);
    if (cached && verifyCallbackCredential(m?.[1], cached.hash)) {
      res.locals.credential = cached;
      return next();
    }
    const lookup = isUuid(id)
      ? db.query<{ status: string; callback_hash: Buffer | null }>(
          'SELECT status, callback_hash FROM registrations WHERE id = $1',
          [id],
        )
      : Promise.resolve({ rows: [] as Array<{ status: string; callback_hash: Buffer | null }> });
    lookup
      .then((r) => {
        const row = r.rows[0];
        if (!verifyCallbackCredential(m?.[1], row?.callback_hash)) return refuse(res);
        const entry = { hash: row!.callback_hash!, ended: ENDED.has(row!.status) };
        credentials.set(id, entry);
        res.locals.credential = entry;
        next();
      })
      .catch(next);
  };

  app.post('/a2a/push/:registrationId', authenticate, rawBody, (req, res, next) => {
    // No body at all (neither Content-Length nor Transfer-Encoding): the parser leaves none; as empty.
    const body: Buffer = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    const contentType = req.headers['content-type'];
    if (!isJsonMediaType(contentType))
      return answer(
        res,
        new Problem(
          'unsupported_media_type',
          'the body must be a StreamResponse as application/json or application/a2a+json',
        ),
        'media_type',
      );
    const charset = charsetRefusal(contentType);
    if (charset) return answer(res, new Problem('unsupported_media_type', charset), 'media_type');
    // A JSON media type with no body: the validator's 400 (contract §6), not the media type's 415.
    if (body.length === 0)
      return answer(
        res,
        new Problem('validation', 'the body is empty: a StreamResponse is required', {
          errors: [{ path: '', message: 'the body is empty' }],
        }),
        'invalid',
      );
    // Bytes that are not UTF-8 are refused, never stored as U+FFFD (the body is kept byte for byte).
    const text = utf8Text(body);
    if (text === undefined) return answer(res, notUtf8Problem(), 'invalid');
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return answer(
        res,
        new Problem('validation', 'the body is not valid JSON', {
          errors: [{ path: '', message: 'not valid JSON' }],
        }),
        'invalid',
      );
    }
    const v = validateStreamResponse(value);
    if (!v.ok)
      return answer(
        res,
        new Problem('validation', 'the body is not a StreamResponse', { errors: v.errors }),
        'invalid',
      );

    const id = String(req.params.registrationId);
    const credential = res.locals.credential as CachedCredential;
    const late = async () => {
      await countLate(db, id);
      res.locals.reason = 'late';
      res.status(200).json({ status: 'late' });
    };
    const store = async () => {
      if (credential.ended) return late();
      // Stored together with the callbacks that arrive meanwhile (group commit, migration 008): one
      // statement re-checks the credential, takes the per-registration slot (exact: the registration
      // rows are locked), checks the total and inserts; the answer waits for that commit.
      const busy = () =>
        answer(
          res,
          new Problem('unavailable', 'the inbox is busy; retry later', {}, { 'Retry-After': '5' }),
          'busy',
        );
      if (storer.waiting() >= STORE_QUEUE_MAX) return busy();
      let target: Target | null;
      try {
        target = await storer.submit({
          registrationId: id,
          hash: credential.hash,
          taskId: v.taskId === undefined ? null : wellFormed(v.taskId),
          kind: v.kind,
          body: text,
          traceparent: currentTraceparent() ?? null,
        });
      } catch (err) {
        if ((err as { code?: unknown }).code === LOCK_NOT_AVAILABLE) return busy();
        throw err;
      }
      if (target) {
        res.locals.reason = 'stored';
        res.status(200).json({ status: 'accepted' });
        if (target.inbox_pending === 1) coalescer.signal(target);
        else coalescer.remind(target);
        return;
      }
      // Not stored: say why, from the row as it is now (the rare path).
      const now = await db.query<{ status: string; inbox_pending: number; callback_hash: Buffer | null }>(
        'SELECT status, inbox_pending, callback_hash FROM registrations WHERE id = $1',
        [id],
      );
      const r = now.rows[0];
      if (!r || !sameCallbackHash(r.callback_hash, credential.hash)) {
        // The credential was replaced (or the row removed) since it was checked: as if it never matched.
        credentials.delete(id);
        return refuse(res);
      }
      if (ENDED.has(r.status)) {
        credential.ended = true;
        return late();
      }
      const outcome =
        r.inbox_pending >= settings.INBOX_BOUND_PER_REGISTRATION ? 'bound_registration' : 'bound_total';
      answer(
        res,
        new Problem(
          'rate_limited',
          'too many unprocessed callbacks; retry later',
          {},
          { 'Retry-After': '5' },
        ),
        outcome,
      );
    };
    store().catch(next);
  });
  app.all('/a2a/push/:registrationId', (req, res) =>
    sendProblem(
      res,
      new Problem(
        'method_not_allowed',
        `${req.method} is not allowed here; allowed: POST`,
        {},
        { Allow: 'POST' },
      ),
    ),
  );
  app.use((req, res) => sendProblem(res, new Problem('not_found', `no route ${req.method} ${req.path}`)));
  app.use(errorHandler(deps.logger));
  return { app, coalescer };
}
