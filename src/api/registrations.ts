import crypto from 'node:crypto';
import { Router } from 'express';
import { audit } from '../db/audit';
import { callbackUrl, isUuid } from '../ids';
import { inTx, type Tx } from '../db/pool';
import {
  feedItemView,
  getRegistration,
  markCallbacksProcessed,
  readFeed,
  registrationView,
  type RegistrationRow,
} from '../db/registrations';
import { MASK } from '../sealing/keyring';
import { newCallbackCredential } from '../sealing/callback';
import { sealSecret } from '../sealing/secrets';
import { signalRegistration, signalRegistrationDeleted } from '../starts/client';
import { handle, parseBody, parseQuery, rawBody } from '../http/body';
import { checkTargetUrl } from './configs';
import { callerOf, writeAnswer, type ApiDeps } from './context';
import { longPoll, type Feeds } from './feed-notifier';
import { Problem } from '../http/problem';
import { allow } from './routing';
import { createRegistrationBody, feedQuery, remoteTaskBody } from './schemas';

export function registrationRoutes(deps: ApiDeps & { feeds: Feeds }): Router {
  const r = Router();
  const publicBase = () => {
    const b = deps.settings.PUBLIC_BASE_URL;
    if (!b) throw new Error('PUBLIC_BASE_URL is not set');
    return b;
  };

  async function load(tx: Tx | ApiDeps['db'], tenantId: string, id: string, lock = false) {
    const row = isUuid(id) ? await getRegistration(tx, tenantId, id, lock) : undefined;
    if (!row) throw new Problem('not_found', `no registration "${id}"`);
    return row;
  }

  const start = (
    row: Pick<RegistrationRow, 'id' | 'tenant_id' | 'agent_url' | 'remote_task_id'>,
    signal: 'callback' | 'remoteTask',
  ) =>
    signalRegistration(deps.temporal, deps.settings.TASK_QUEUE, row, signal)
      .then(() => deps.db.query('UPDATE registrations SET workflow_started = true WHERE id = $1', [row.id]))
      .catch((err: unknown) =>
        deps.logger.warn(
          { err: (err as Error).message, registrationId: row.id },
          'registration start deferred to the sweep',
        ),
      );

  r.route('/v1/registrations')
    .post(
      rawBody,
      handle(async (req, res) => {
        const { data: body, value } = parseBody(req, createRegistrationBody);
        checkTargetUrl(deps, body.agent.url, 'agent.url');
        const { tenantId, apiKeyId } = callerOf(res);
        await writeAnswer(
          deps,
          req,
          res,
          value,
          async (tx) => {
            const id = crypto.randomUUID();
            const tokenId = body.agent.bearerToken
              ? await sealSecret(tx, deps.keyring, tenantId, 'agent_token', body.agent.bearerToken)
              : null;
            const cred = body.mode === 'embedded' ? newCallbackCredential() : undefined;
            const ins = await tx.query<RegistrationRow>(
              `INSERT INTO registrations (id, tenant_id, mode, status, agent_url, agent_token_id, remote_task_id, push_enabled, callback_hash)
               VALUES ($1, $2, $3, $4, $5, $6, $7, true, $8) RETURNING *`,
              [
                id,
                tenantId,
                body.mode,
                body.mode === 'embedded' ? 'pending' : 'active',
                body.agent.url,
                tokenId,
                body.remoteTaskId ?? null,
                cred?.hash ?? null,
              ],
            );
            const row = ins.rows[0]!;
            await audit(tx, {
              tenantId,
              actor: apiKeyId,
              action: 'registration.created',
              objectType: 'registration',
              objectId: id,
              after: row.status,
            });
            const view = registrationView({ ...row, pending: '0' });
            const config = (credentials: string) => ({
              id,
              url: callbackUrl(publicBase(), id),
              authentication: { scheme: 'Bearer', credentials },
            });
            return {
              status: 201,
              body: cred ? { ...view, pushNotificationConfig: config(cred.credential) } : view,
              stored: cred ? { ...view, pushNotificationConfig: config(MASK) } : view,
              after: () => start(row, 'callback'),
            };
          },
          async (tx, stored) => {
            // A repeat while the embedded registration is still pending: its answer may have been lost,
            // so hand out a fresh credential (the old one stops working). Afterwards it stays masked.
            const s = stored.body as {
              id?: string;
              pushNotificationConfig?: { authentication: { credentials: string } };
            };
            if (!s.pushNotificationConfig || !s.id) return stored;
            const cred = newCallbackCredential();
            const u = await tx.query(
              `UPDATE registrations SET callback_hash = $2 WHERE id = $1 AND status = 'pending' AND remote_task_id IS NULL`,
              [s.id, cred.hash],
            );
            if (!u.rowCount) return stored;
            const row = await load(tx, tenantId, s.id);
            return {
              status: stored.status,
              body: {
                ...registrationView(row),
                pushNotificationConfig: {
                  ...s.pushNotificationConfig,
                  authentication: { scheme: 'Bearer', credentials: cred.credential },
                },
              },
            };
          },
        );
      }),
    )
    .all(allow('POST'));

  r.route('/v1/registrations/:id/remote-task')
    .post(
      rawBody,
      handle(async (req, res) => {
        const { data: body, value } = parseBody(req, remoteTaskBody);
        const { tenantId, apiKeyId } = callerOf(res);
        await writeAnswer(deps, req, res, value, async (tx) => {
          const row = await load(tx, tenantId, String(req.params.id), true);
          if (row.mode !== 'embedded')
            throw new Problem('conflict', 'a separate registration names its remote task at creation');
          if (row.remote_task_id !== null) {
            if (row.remote_task_id !== body.remoteTaskId)
              throw new Problem(
                'conflict',
                `the registration already waits on remote task "${row.remote_task_id}"`,
              );
            return { status: 200, body: registrationView(row) };
          }
          if (row.status !== 'pending') throw new Problem('conflict', `the registration is ${row.status}`);
          const u = await tx.query<RegistrationRow>(
            // workflow_started goes back to false until the run has the id (`start` below): if that
            // signal is lost, the dispatcher's sweep sends it again.
            `UPDATE registrations SET remote_task_id = $2, status = 'active', workflow_started = false WHERE id = $1 RETURNING *`,
            [row.id, body.remoteTaskId],
          );
          await audit(tx, {
            tenantId,
            actor: apiKeyId,
            action: 'registration.status_changed',
            objectType: 'registration',
            objectId: row.id,
            before: 'pending',
            after: 'active',
          });
          const updated = u.rows[0]!;
          return {
            status: 200,
            body: registrationView({ ...updated, pending: row.pending }),
            after: () => start(updated, 'remoteTask'),
          };
        });
      }),
    )
    .all(allow('POST'));

  r.route('/v1/registrations/:id')
    .get(
      handle(async (req, res) => {
        res.json(registrationView(await load(deps.db, callerOf(res).tenantId, String(req.params.id))));
      }),
    )
    .delete(
      handle(async (req, res) => {
        const { tenantId, apiKeyId } = callerOf(res);
        const id = String(req.params.id);
        const deleted = isUuid(id)
          ? await inTx(deps.db, async (tx) => {
              const row = await getRegistration(tx, tenantId, id, true);
              if (!row || row.status === 'deleted') return false;
              await tx.query(`UPDATE registrations SET status = 'deleted' WHERE id = $1`, [id]);
              // Its unprocessed callbacks stop counting against the bounds.
              await markCallbacksProcessed(tx, id);
              await audit(tx, {
                tenantId,
                actor: apiKeyId,
                action: 'registration.deleted',
                objectType: 'registration',
                objectId: id,
                before: row.status,
                after: 'deleted',
              });
              return true;
            })
          : false;
        res.status(204).end();
        if (deleted) void signalRegistrationDeleted(deps.temporal, id);
      }),
    )
    .all(allow('GET', 'DELETE'));

  r.route('/v1/resolutions')
    .get(
      handle(async (req, res) => {
        const q = parseQuery(req, feedQuery);
        const { tenantId } = callerOf(res);
        const items = await longPoll(deps.feeds.resolutions, tenantId, q.wait, res, () =>
          readFeed(deps.db, tenantId, q.after, q.limit),
        );
        res.json({ items: items.map(feedItemView), nextCursor: items.at(-1)?.cursor ?? q.after });
      }),
    )
    .all(allow('GET'));

  return r;
}
