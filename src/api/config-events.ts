import { Router } from 'express';
import { configEventView, readConfigEvents } from '../db/config-events';
import { handle, parseQuery } from '../http/body';
import { callerOf, type ApiDeps } from './context';
import { longPoll, type Feeds } from './feed-notifier';
import { allow } from './routing';
import { feedQuery } from './schemas';

/**
 * GET /v1/configEvents (contract §11): the tenant's config events, paged and long-polled exactly as
 * /v1/resolutions.
 */
export function configEventRoutes(deps: ApiDeps & { feeds: Feeds }): Router {
  const r = Router();
  r.route('/v1/configEvents')
    .get(
      handle(async (req, res) => {
        const q = parseQuery(req, feedQuery);
        const { tenantId } = callerOf(res);
        const items = await longPoll(deps.feeds.configEvents, tenantId, q.wait, res, () =>
          readConfigEvents(deps.db, tenantId, q.after, q.limit),
        );
        res.json({ items: items.map(configEventView), nextCursor: items.at(-1)?.cursor ?? q.after });
      }),
    )
    .all(allow('GET'));
  return r;
}
