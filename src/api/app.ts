import crypto from 'node:crypto';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Registry } from 'prom-client';
import { findApiKey } from '../db/apikeys';
import { withRequestContext } from '../request-context';
import { runServerSpan, type IncomingTrace } from '../tracing';
import { isDbUnavailable } from '../db/pool';
import type { ApiDeps } from './context';
import { configRoutes } from './configs';
import { deliveryRoutes } from './deliveries';
import { eventRoutes } from './events';
import type { FeedNotifier } from './feed-notifier';
import { registrationRoutes } from './registrations';
import { auditRoutes } from './audit';
import { openApiDocument } from './openapi';
import { Problem, sendProblem } from './problem';

export interface Probe {
  (): Promise<Record<string, boolean>>;
}

/** /healthz, /readyz and /metrics: served by every listener, without a key. */
export function opsRoutes(registry: Registry, ready: Probe) {
  const r = express.Router();
  r.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  r.get('/readyz', (_req, res, next) => {
    ready()
      .then((checks) => {
        const ok = Object.values(checks).every(Boolean);
        res.status(ok ? 200 : 503).json({ status: ok ? 'ready' : 'unavailable', checks });
      })
      .catch(next);
  });
  r.get('/metrics', (_req, res, next) => {
    registry
      .metrics()
      .then((text) => res.type(registry.contentType).send(text))
      .catch(next);
  });
  return r;
}

/**
 * One request id per request (a valid `X-Request-Id` is kept, else a fresh UUID), echoed in the answer,
 * and one "request completed" line when the answer is sent, in pino-http's shape (`req`, `res`,
 * `responseTime`). The request's child logger is made only when something logs: pino-http made one per
 * request and serialized the request into it (redaction included) whether or not a line was written,
 * which was a fifth of the inbox's CPU per callback (bench 4's profile).
 *
 * With tracing on, the request runs in an HTTP server span; `incoming` says what an incoming
 * `traceparent` is: the parent (the API: nr-llm is the caller) or only a link (the inbox: agents are not
 * trusted), src/tracing.ts.
 */
export function requestLogger(deps: { logger: ApiDeps['logger'] }, incoming: IncomingTrace = 'link') {
  const { logger } = deps;
  return (req: Request, res: Response, next: NextFunction) => {
    const given = req.headers['x-request-id'];
    const id = typeof given === 'string' && /^[\w.:-]{1,128}$/.test(given) ? given : crypto.randomUUID();
    res.setHeader('X-Request-Id', id);
    (req as Request & { id: string }).id = id;
    const started = performance.now();
    let child: ApiDeps['logger'] | undefined;
    const log = () => (child ??= logger.child({ reqId: id }));
    const done = () => {
      res.removeListener('finish', done);
      res.removeListener('close', done);
      const aborted = !res.writableFinished;
      const level = res.statusCode >= 500 ? 'error' : aborted ? 'warn' : 'info';
      if (!logger.isLevelEnabled(level)) return;
      log()[level](
        {
          req: { id, method: req.method, url: req.originalUrl },
          res: { statusCode: res.statusCode },
          responseTime: Math.round(performance.now() - started),
        },
        aborted ? 'request aborted' : res.statusCode >= 500 ? 'request errored' : 'request completed',
      );
    };
    res.on('finish', done);
    res.on('close', done);
    runServerSpan(req, res, incoming, () =>
      withRequestContext(
        {
          requestId: id,
          get logger() {
            return log();
          },
        },
        next,
      ),
    );
  };
}

/** Maps whatever reached the end to problem+json: body-parser's errors, our Problems, Postgres outages. */
export function errorHandler(logger: ApiDeps['logger']) {
  return (err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    void _next;
    const e = err as { type?: string; status?: number };
    let p: Problem;
    if (err instanceof Problem) p = err;
    else if (e?.type === 'entity.too.large')
      p = new Problem('payload_too_large', 'the body is larger than 1 MiB');
    else if (e?.type === 'request.aborted') p = new Problem('validation', 'the request was aborted');
    else if (isDbUnavailable(err)) {
      logger.warn({ err }, 'database unavailable');
      p = new Problem('unavailable', 'the database is unavailable; retry later', {}, { 'Retry-After': '5' });
    } else {
      logger.error({ err }, 'unhandled error');
      res
        .status(500)
        .type('application/problem+json')
        .send(
          JSON.stringify({
            type: 'about:blank',
            title: 'Internal error',
            status: 500,
            detail: 'internal error',
          }),
        );
      return;
    }
    if (res.headersSent) return;
    sendProblem(res, p);
  };
}

export function createApiApp(deps: ApiDeps & { feed: FeedNotifier }, registry: Registry, ready: Probe) {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(requestLogger(deps, 'parent'));
  app.use(opsRoutes(registry, ready));

  const openapi = openApiDocument();
  app.get('/v1/openapi.json', (_req, res) => {
    res.json(openapi);
  });

  // Authentication comes first on /v1, before the route is matched (unknown routes answer 401 too).
  app.use('/v1', (req, res, next) => {
    if (req.path === '/openapi.json') return next();
    const h = req.headers.authorization;
    const m = typeof h === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
    const fail = () =>
      sendProblem(
        res,
        new Problem(
          'unauthorized',
          'a valid API key is required (Authorization: Bearer <key>)',
          {},
          {
            'WWW-Authenticate': 'Bearer realm="a2a-push"',
          },
        ),
      );
    if (!m) return fail();
    findApiKey(deps.db, m[1]!)
      .then((k) => {
        if (!k) return fail();
        res.locals.caller = { tenantId: k.tenantId, apiKeyId: k.id };
        next();
      })
      .catch(next);
  });

  app.use(configRoutes(deps));
  app.use(eventRoutes(deps));
  app.use(deliveryRoutes(deps));
  app.use(registrationRoutes(deps));
  app.use(auditRoutes(deps));

  app.use((req, res) => sendProblem(res, new Problem('not_found', `no route ${req.method} ${req.path}`)));
  app.use(errorHandler(deps.logger));
  return app;
}
