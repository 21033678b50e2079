import crypto from 'node:crypto';
import { configEvents } from '../metrics';
import { Router } from 'express';
import { audit } from '../db/audit';
import { inTx, type Tx } from '../db/pool';
import { configView, deleteConfig, getLiveConfig, listConfigs, type ConfigRow } from '../db/outbox';
import { checkUrlStatic, countRefusal } from '../outbound';
import { sealSecret } from '../sealing/secrets';
import { handle, parseBody, parseQuery, rawBody } from '../http/body';
import { callerOf, writeAnswer, type ApiDeps } from './context';
import { Problem, validationProblem } from '../http/problem';
import { configListQuery, createConfigBody, idSchema, pageQuery } from './schemas';
import { allow } from './routing';

export function pathId(value: unknown, name: string): string {
  const r = idSchema.safeParse(value);
  if (!r.success) throw validationProblem([{ path: name, message: r.error.issues[0]!.message }]);
  return r.data;
}

/** The static part of the address guard, at creation: a refusal is a 400 naming the rule. */
export function checkTargetUrl(deps: ApiDeps, url: string, path: string): string {
  const v = checkUrlStatic(url, deps.policy);
  if (!v.ok) {
    countRefusal(v.rule);
    throw new Problem('guard_refused', `${path} is refused by the address guard (${v.rule}): ${v.message}`, {
      errors: [{ path, message: v.message }],
      rule: v.rule,
    });
  }
  return url;
}

/**
 * At most `limit` configs that are not deleted per task (MAX_CONFIGS_PER_TASK): every event of the
 * task fans out to them, so one client's creates cannot turn an event into thousands of POSTs. Exact
 * under concurrent creates: creators of one task queue on a transaction-level advisory lock of
 * (tenant, task) before they count, and the lock is held until the creating transaction commits.
 */
export async function checkConfigRoom(tx: Tx, tenantId: string, taskId: string, limit: number) {
  // The two-key form: its key space does not overlap the one-key locks taken elsewhere.
  await tx.query(`SELECT pg_advisory_xact_lock(hashtext('a2a_push_configs'), hashtext($1 || '/' || $2))`, [
    tenantId,
    taskId,
  ]);
  const r = await tx.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM push_configs WHERE tenant_id = $1 AND task_id = $2 AND deleted_at IS NULL',
    [tenantId, taskId],
  );
  if (r.rows[0]!.n >= limit)
    throw new Problem(
      'conflict',
      `a task has at most ${limit} push configs (MAX_CONFIGS_PER_TASK): task "${taskId}" has ${r.rows[0]!.n} that are not deleted (active, auth_failed or stopped); delete one first`,
    );
}

export function configRoutes(deps: ApiDeps): Router {
  const r = Router();
  const base = '/v1/tasks/:taskId/pushNotificationConfigs';

  r.route(base)
    .get(
      handle(async (req, res) => {
        const taskId = pathId(req.params.taskId, 'taskId');
        const q = parseQuery(req, pageQuery);
        const page = await listConfigs(deps.db, {
          tenantId: callerOf(res).tenantId,
          taskId,
          after: q.pageToken,
          limit: q.pageSize,
        });
        res.json({ configs: page.rows.map(configView), ...(page.next ? { nextPageToken: page.next } : {}) });
      }),
    )
    .post(
      rawBody,
      handle(async (req, res) => {
        const taskId = pathId(req.params.taskId, 'taskId');
        const { data: body, value } = parseBody(req, createConfigBody);
        if (body.taskId !== undefined && body.taskId !== taskId)
          throw validationProblem([{ path: 'taskId', message: "must equal the path's taskId" }]);
        checkTargetUrl(deps, body.url, 'url');
        const { tenantId, apiKeyId } = callerOf(res);
        const id = body.id ?? crypto.randomUUID();
        await writeAnswer(deps, req, res, value, async (tx) => {
          await checkConfigRoom(tx, tenantId, taskId, deps.settings.MAX_CONFIGS_PER_TASK);
          const credentialId = body.authentication
            ? await sealSecret(tx, deps.keyring, tenantId, 'push_credential', body.authentication.credentials)
            : null;
          let row: ConfigRow;
          try {
            const ins = await tx.query<ConfigRow>(
              `INSERT INTO push_configs (tenant_id, task_id, id, url, token, auth_scheme, credential_id)
               VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING *`,
              [
                tenantId,
                taskId,
                id,
                body.url,
                body.token ?? null,
                body.authentication?.scheme ?? null,
                credentialId,
              ],
            );
            row = ins.rows[0]!;
          } catch (err) {
            if ((err as { code?: string }).code === '23505')
              throw new Problem(
                'conflict',
                `a push config with id "${id}" already exists for task "${taskId}"`,
              );
            throw err;
          }
          await audit(tx, {
            tenantId,
            actor: apiKeyId,
            action: 'push_config.created',
            objectType: 'push_config',
            objectId: `${taskId}/${id}`,
            after: 'active',
          });
          return { status: 201, body: configView(row) };
        });
      }),
    )
    .all(allow('GET', 'POST'));

  r.route(`${base}/:configId`)
    .get(
      handle(async (req, res) => {
        const taskId = pathId(req.params.taskId, 'taskId');
        const configId = pathId(req.params.configId, 'configId');
        const row = await getLiveConfig(deps.db, callerOf(res).tenantId, taskId, configId);
        if (!row) throw new Problem('not_found', `no push config "${configId}" for task "${taskId}"`);
        res.json(configView(row));
      }),
    )
    .delete(
      handle(async (req, res) => {
        const taskId = pathId(req.params.taskId, 'taskId');
        const configId = pathId(req.params.configId, 'configId');
        const { tenantId, apiKeyId } = callerOf(res);
        const jobs = await inTx(deps.db, (tx) => deleteConfig(tx, tenantId, taskId, configId, apiKeyId));
        res.status(204).end();
        // Deliveries with a workflow end `cancelled` now rather than at their timers (the rest already did).
        if (jobs) {
          configEvents.inc({ kind: 'deleted' });
          deps.relay.wake(jobs);
        }
      }),
    )
    .all(allow('GET', 'DELETE'));

  r.route('/v1/pushNotificationConfigs')
    .get(
      handle(async (req, res) => {
        const q = parseQuery(req, configListQuery);
        const page = await listConfigs(deps.db, {
          tenantId: callerOf(res).tenantId,
          ...(q.status ? { status: q.status } : {}),
          after: q.pageToken,
          limit: q.pageSize,
        });
        res.json({ configs: page.rows.map(configView), ...(page.next ? { nextPageToken: page.next } : {}) });
      }),
    )
    .all(allow('GET'));

  return r;
}
