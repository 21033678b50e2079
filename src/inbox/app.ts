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
 * registration dirty, and one more signal follows when it returns. A lost signal is repaired by polling.
 */
export class SignalCoalescer {
  private readonly state = new Map<string, { dirty: boolean }>();
  constructor(private readonly send: (t: Target) => Promise<void>) {}
  inFlight(): number {
    return this.state.size;
  }
  signal(t: Target): void {
    const s = this.state.get(t.id);
    if (s) {
      s.dirty = true;
      return;
    }
    const entry = { dirty: false };
    this.state.set(t.id, entry);
    const loop = async () => {
      do {
        entry.dirty = false;
        await this.send(t).catch(() => undefined);
      } while (entry.dirty);
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

  const coalescer = new SignalCoalescer(async (t) => {
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
      const client = await db.connect();
      let outcome: 'stored' | 'late' | 'bound_registration' | 'bound_total';
      try {
        await client.query('BEGIN');
        // The row lock serialises callbacks per registration, so its bound counts exactly.
        const lock = await client.query<{ status: string }>(
          'SELECT status FROM registrations WHERE id = $1 FOR UPDATE',
          [t.id],
        );
        const status = lock.rows[0]?.status;
        if (status !== 'pending' && status !== 'active') {
          await countLate(client, t.id);
          outcome = 'late';
        } else {
          // The per-registration count is exact under the row lock above; the total bound is one
          // counter row (migration 005), taken last so its lock is held only to the commit.
          const r = await client.query<{ inserted: string; per: string }>(
            `WITH per AS (SELECT count(*) AS c FROM inbox_callbacks WHERE registration_id = $1 AND processed_at IS NULL),
                    slot AS (UPDATE inbox_pending SET pending = pending + 1
                              WHERE id = 1 AND pending < $6 AND (SELECT c FROM per) < $5 RETURNING 1),
                    ins AS (INSERT INTO inbox_callbacks (registration_id, body_task_id, kind, body)
                            SELECT $1, $2, $3, $4 FROM slot RETURNING id),
                    upd AS (UPDATE registrations SET callbacks_received = callbacks_received + 1
                             WHERE id = $1 AND EXISTS (SELECT 1 FROM ins) RETURNING 1)
               SELECT (SELECT count(*) FROM ins) AS inserted, per.c AS per FROM per`,
            [
              t.id,
              v.taskId ?? null,
              v.kind,
              text,
              settings.INBOX_BOUND_PER_REGISTRATION,
              settings.INBOX_BOUND_TOTAL,
            ],
          );
          const row = r.rows[0]!;
          outcome =
            row.inserted !== '0'
              ? 'stored'
              : Number(row.per) >= settings.INBOX_BOUND_PER_REGISTRATION
                ? 'bound_registration'
                : 'bound_total';
        }
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw err;
      } finally {
        client.release();
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
