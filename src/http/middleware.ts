import crypto from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';
import type { Logger } from 'pino';
import { isDbUnavailable } from '../db/pool';
import { withRequestContext } from '../request-context';
import { runServerSpan, type IncomingTrace } from '../tracing';
import { Problem, sendProblem } from './problem';

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
export function requestLogger(deps: { logger: Logger }, incoming: IncomingTrace = 'link') {
  const { logger } = deps;
  return (req: Request, res: Response, next: NextFunction) => {
    const given = req.headers['x-request-id'];
    const id = typeof given === 'string' && /^[\w.:-]{1,128}$/.test(given) ? given : crypto.randomUUID();
    res.setHeader('X-Request-Id', id);
    (req as Request & { id: string }).id = id;
    const started = performance.now();
    let child: Logger | undefined;
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
export function errorHandler(logger: Logger) {
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
