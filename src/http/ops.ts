import express from 'express';
import type { Registry } from 'prom-client';

/** What /readyz checks: each name true when reachable. */
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
