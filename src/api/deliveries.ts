import { isUuid } from '../ids';
import crypto from 'node:crypto';
import { Router } from 'express';
import {
  afterWrite,
  deliveryView,
  getAttempts,
  getJob,
  getLiveConfig,
  waitingForOf,
  type JobRow,
} from '../db/outbox';
import { currentRequestId } from '../request-context';
import { currentTraceparent } from '../tracing';
import { handle, parseBody, parseQuery, rawBody } from '../http/body';
import { pathId } from './configs';
import { callerOf, writeAnswer, type ApiDeps } from './context';
import { Problem } from '../http/problem';
import { allow } from './routing';
import { emptyBody, pageQuery } from './schemas';

export function deliveryRoutes(deps: ApiDeps): Router {
  const r = Router();

  async function view(job: JobRow) {
    const attempts = await getAttempts(deps.db, [job.id]);
    return deliveryView(job, attempts.get(job.id)!, await waitingForOf(deps.db, job));
  }

  // `{id}` and `{id}:retry` share one path segment.
  r.route('/v1/deliveries/:idAction')
    .all((req, res, next) => {
      const retry = String(req.params.idAction).endsWith(':retry');
      const allowed = retry ? ['POST'] : ['GET'];
      if (!allowed.includes(req.method === 'HEAD' ? 'GET' : req.method)) return allow(...allowed)(req, res);
      next();
    })
    .get(
      handle(async (req, res) => {
        const id = String(req.params.idAction);
        const job = isUuid(id) ? await getJob(deps.db, callerOf(res).tenantId, id) : undefined;
        if (!job) throw new Problem('not_found', `no delivery "${id}"`);
        res.json(await view(job));
      }),
    )
    .post(
      rawBody,
      handle(async (req, res) => {
        const id = String(req.params.idAction).slice(0, -':retry'.length);
        const { value } = parseBody(req, emptyBody);
        const { tenantId } = callerOf(res);
        await writeAnswer(deps, req, res, value, async (tx) => {
          const job = isUuid(id) ? await getJob(tx, tenantId, id) : undefined;
          if (!job) throw new Problem('not_found', `no delivery "${id}"`);
          if (job.status === 'delivered' || !job.finished_at)
            throw new Problem(
              'conflict',
              `delivery ${id} is ${job.status}: only a finished, undelivered job is retried`,
            );
          const cfg = await tx.query<{ status: string; deleted: boolean; url: string }>(
            'SELECT status, deleted_at IS NOT NULL AS deleted, url FROM push_configs WHERE row_id = $1 FOR UPDATE',
            [job.config_row_id],
          );
          const c = cfg.rows[0];
          if (!c || c.deleted || c.status !== 'active')
            throw new Problem(
              'conflict',
              `the config of delivery ${id} is ${c?.deleted ? 'deleted' : c?.status}`,
            );
          const newId = crypto.randomUUID();
          const ordered = deps.settings.DELIVERY_ORDER === 'per_config';
          const leaseMs = deps.relay.leaseMs(tenantId);
          const ins = await tx.query<JobRow>(
            // A deliberate resend: at the end of the config's line (not due while it has an unended
            // job: the config row is locked), with the original event's number.
            `INSERT INTO delivery_jobs (id, tenant_id, event_id, config_row_id, task_id, config_id, deadline, retry_of, request_id, traceparent,
                                        push_seq, ordered, held_by, dispatch_lease)
             SELECT $1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7::double precision / 1000), $8, $9, $10, $11, $12,
                    x.behind,
                    CASE WHEN x.behind IS NULL AND $13::double precision IS NOT NULL
                         THEN now() + make_interval(secs => $13::double precision / 1000) END
               FROM (SELECT CASE WHEN $12 THEN outbox_line_tail($4) END AS behind) x
             RETURNING *`,
            [
              newId,
              tenantId,
              job.event_id,
              job.config_row_id,
              job.task_id,
              job.config_id,
              deps.settings.DELIVERY_DEADLINE,
              job.id,
              currentRequestId() ?? null,
              currentTraceparent() ?? null,
              job.push_seq,
              ordered,
              leaseMs ?? null,
            ],
          );
          const row = ins.rows[0]!;
          const after = await afterWrite(
            tx,
            [job.config_row_id],
            deps.settings.OUTBOX_BOUND_PER_CONFIG,
            leaseMs,
          );
          const due = [
            ...(row.held_by === null
              ? [
                  {
                    id: row.id,
                    tenantId,
                    taskId: row.task_id,
                    configId: row.config_id,
                    url: c.url,
                    requestId: row.request_id,
                    traceparent: row.traceparent,
                  },
                ]
              : []),
            ...after.due,
          ];
          return {
            status: 201,
            body: deliveryView(row, []),
            after: () => {
              if (leaseMs !== undefined) deps.relay.take(due);
              else deps.relay.kick();
              deps.relay.wake(after.superseded);
            },
          };
        });
      }),
    );

  r.route('/v1/tasks/:taskId/pushNotificationConfigs/:configId/deliveries')
    .get(
      handle(async (req, res) => {
        const taskId = pathId(req.params.taskId, 'taskId');
        const configId = pathId(req.params.configId, 'configId');
        const q = parseQuery(req, pageQuery);
        const { tenantId } = callerOf(res);
        const cfg = await getLiveConfig(deps.db, tenantId, taskId, configId);
        if (!cfg) throw new Problem('not_found', `no push config "${configId}" for task "${taskId}"`);
        const rows = await deps.db.query<JobRow>(
          `SELECT * FROM delivery_jobs WHERE config_row_id = $1 AND ($2::bigint = 0 OR seq < $2::bigint)
            ORDER BY seq DESC LIMIT $3`,
          [cfg.row_id, q.pageToken, q.pageSize + 1],
        );
        const page = rows.rows.slice(0, q.pageSize);
        const attempts = await getAttempts(
          deps.db,
          page.map((j) => j.id),
        );
        res.json({
          deliveries: page.map((j) => deliveryView(j, attempts.get(j.id)!)),
          ...(rows.rows.length > q.pageSize ? { nextPageToken: page.at(-1)!.seq } : {}),
        });
      }),
    )
    .all(allow('GET'));

  return r;
}
