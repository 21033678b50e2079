import express from 'express';
import type { Registry } from 'prom-client';
import { findApiKey } from '../db/apikeys';
import { errorHandler, requestLogger } from '../http/middleware';
import { opsRoutes, type Probe } from '../http/ops';
import { Problem, sendProblem } from '../http/problem';
import type { ApiDeps } from './context';
import { configRoutes } from './configs';
import { deliveryRoutes } from './deliveries';
import { eventRoutes } from './events';
import type { Feeds } from './feed-notifier';
import { configEventRoutes } from './config-events';
import { registrationRoutes } from './registrations';
import { auditRoutes } from './audit';
import { openApiDocument } from './openapi';

export function createApiApp(deps: ApiDeps & { feeds: Feeds }, registry: Registry, ready: Probe) {
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
  app.use(configEventRoutes(deps));
  app.use(auditRoutes(deps));

  app.use((req, res) => sendProblem(res, new Problem('not_found', `no route ${req.method} ${req.path}`)));
  app.use(errorHandler(deps.logger));
  return app;
}
