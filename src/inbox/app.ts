import crypto from 'node:crypto';
import { isUuid } from '../ids';
import express, { type Request, type Response } from 'express';
import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { errorHandler, opsRoutes, requestLogger, type Probe } from '../api/app';
import { isJsonMediaType, rawBody } from '../api/body';
import { Problem, sendProblem } from '../api/problem';
import type { Settings } from '../config';
import type { Db } from '../db/pool';
import { inboxRequests } from '../metrics';
import { verifyCallbackCredential } from '../sealing/callback';
import { validateStreamResponse } from '../stream-response';
import { signalRegistration } from '../temporal';

export interface InboxDeps {
  db: Db;
  settings: Settings;
  logger: Logger;
  temporal: Client;
}

interface Target {
  id: string;
  tenant_id: string;
  status: string;
  agent_url: string;
  remote_task_id: string | null;
  callback_hash: Buffer | null;
}

/**
 * Coalesces workflow signals per registration: while one is in flight, newer callbacks only mark the
 * registration dirty, and one more signal follows when it returns, no sooner than `minIntervalMs`
 * after the previous one began. The first callback after a quiet spell signals at once; a burst costs
 * the Temporal server at most one signal per registration per interval. A lost signal is repaired by
 * polling.
 */
export class SignalCoalescer<T extends { id: string }> {
  private readonly state = new Map<string, { dirty: boolean }>();
  constructor(
    private readonly send: (t: T) => Promise<void>,
    private readonly minIntervalMs = 1_000,
  ) {}
  inFlight(): number {
    return this.state.size;
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
        const began = Date.now();
        await this.send(t).catch(() => undefined);
        if (!entry.dirty) break;
        const wait = this.minIntervalMs - (Date.now() - began);
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      }
      this.state.delete(t.id);
    };
    void loop();
  }
}

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
  app.use(requestLogger(deps));
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

  // Authentication first, before any of the body is read: unknown registration, wrong credential and a
  // resolved registration's wrong credential all look the same.
  const authenticate = (req: Request, res: Response, next: (err?: unknown) => void) => {
    const id = String(req.params.registrationId);
    const h = req.headers.authorization;
    const m = typeof h === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
    const lookup = isUuid(id)
      ? db.query<Target>(
          'SELECT id, tenant_id, status, agent_url, remote_task_id, callback_hash FROM registrations WHERE id = $1',
          [id],
        )
      : Promise.resolve({ rows: [] as Target[] });
    lookup
      .then((r) => {
        const t = r.rows[0];
        if (!verifyCallbackCredential(m?.[1], t?.callback_hash)) {
          res.setHeader('WWW-Authenticate', 'Bearer realm="a2a-push-inbox"');
          res.setHeader('Connection', 'close');
          return answer(
            res,
            new Problem('unauthorized', 'a valid callback credential is required'),
            'unauthorized',
          );
        }
        res.locals.target = t;
        next();
      })
      .catch(next);
  };

  app.post('/a2a/push/:registrationId', authenticate, rawBody, (req, res, next) => {
    const t = res.locals.target as Target;
    const body = req.body as Buffer;
    if (!Buffer.isBuffer(body) || body.length === 0 || !isJsonMediaType(req.headers['content-type']))
      return answer(
        res,
        new Problem(
          'unsupported_media_type',
          'the body must be a StreamResponse as application/json or application/a2a+json',
        ),
        'media_type',
      );
    let value: unknown;
    const text = body.toString('utf8');
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

    const store = async () => {
      if (t.status !== 'pending' && t.status !== 'active') {
        // Late: answered 200 and only counted.
        await countLate(db, t.id);
        res.locals.reason = 'late';
        res.status(200).json({ status: 'late' });
        return;
      }
      // One statement, one round trip: the conditional UPDATE of the registration row takes the
      // per-registration slot (exact: a concurrent callback's lock is waited for and the count
      // re-checked), the stripes' sum checks the total, then the row is inserted (migration 005).
      const stored = await db.query<{ inserted: string }>(
        `WITH reg AS (
                UPDATE registrations SET inbox_pending = inbox_pending + 1, callbacks_received = callbacks_received + 1
                 WHERE id = $1 AND status IN ('pending', 'active') AND inbox_pending < $5
                   AND (SELECT sum(pending) FROM inbox_pending_stripes) < $6
                RETURNING id),
              stripe AS (UPDATE inbox_pending_stripes SET pending = pending + 1
                          WHERE stripe = $7 AND EXISTS (SELECT 1 FROM reg) RETURNING 1),
              ins AS (INSERT INTO inbox_callbacks (registration_id, body_task_id, kind, body)
                      SELECT id, $2, $3, $4 FROM reg RETURNING id)
         SELECT count(*) AS inserted FROM ins`,
        [
          t.id,
          v.taskId ?? null,
          v.kind,
          text,
          settings.INBOX_BOUND_PER_REGISTRATION,
          settings.INBOX_BOUND_TOTAL,
          crypto.randomInt(16),
        ],
      );
      let outcome: 'stored' | 'late' | 'bound_registration' | 'bound_total' = 'stored';
      if (stored.rows[0]!.inserted === '0') {
        // Not stored: say why, from the row as it is now (the rare path).
        const now = await db.query<{ status: string; inbox_pending: number }>(
          'SELECT status, inbox_pending FROM registrations WHERE id = $1',
          [t.id],
        );
        const r = now.rows[0];
        if (!r || (r.status !== 'pending' && r.status !== 'active')) {
          await countLate(db, t.id);
          outcome = 'late';
        } else
          outcome =
            r.inbox_pending >= settings.INBOX_BOUND_PER_REGISTRATION ? 'bound_registration' : 'bound_total';
      }
      if (outcome === 'bound_registration' || outcome === 'bound_total')
        return answer(
          res,
          new Problem(
            'rate_limited',
            'too many unprocessed callbacks; retry later',
            {},
            { 'Retry-After': '5' },
          ),
          outcome,
        );
      res.locals.reason = outcome;
      res.status(200).json({ status: outcome === 'stored' ? 'accepted' : 'late' });
      if (outcome === 'stored') coalescer.signal(t);
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
