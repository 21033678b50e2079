/**
 * The baselines of benchmarks 3 and 4, in their own process: bare Express + pg routes doing the same
 * inserts as ours (no authentication, validation, idempotency, bounds or logging):
 *   POST /v1/tasks/:taskId/events  — the event, one job per active config of the task, in one
 *     transaction; with a Temporal address, then one bare workflow start per job after the answer, at
 *     most 32 in flight (as ours: the write answers, then starts its jobs, 32 starts at a time)
 *   POST /a2a/push/:registrationId — one inbox_callbacks row, committed alone
 *   POST /a2a/push-batched/:registrationId — the same row through the inbox's group commit (same
 *     statements in flight and batch bound): callbacks arriving together go in one multi-row INSERT
 *   GET /stats — workflow starts done and failed, and still queued
 * `baseline-server.ts <databaseUrl> <tenantId> [<temporalAddress> <taskQueue>]`; prints `READY <port>`.
 */
import crypto from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import express from 'express';
import { Pool } from 'pg';
import { GroupCommit } from '../../src/inbox/group-commit';
import { STORE_BATCH_MAX, STORE_WRITES_IN_FLIGHT } from '../../src/inbox/app';

const STARTS_IN_FLIGHT = 32;

async function main() {
  const [databaseUrl, tenantId, temporalAddress, taskQueue] = process.argv.slice(2) as [
    string,
    string,
    string | undefined,
    string | undefined,
  ];
  const db = new Pool({ connectionString: databaseUrl, max: 20 });
  const app = express();
  app.use(express.text({ type: '*/*', limit: '1mb' }));

  // Workflow starts after the answer, as ours makes them: a queue and 32 lanes.
  const connection = temporalAddress ? await Connection.connect({ address: temporalAddress }) : undefined;
  const client = connection ? new Client({ connection }) : undefined;
  const stats = { started: 0, startFailures: 0, queued: 0 };
  const starts: Array<{ id: string; taskId: string }> = [];
  let lanes = 0;
  const pumpStarts = () => {
    while (client && lanes < STARTS_IN_FLIGHT && starts.length > 0) {
      const job = starts.shift()!;
      lanes++;
      client.workflow
        .start('bareDelivery', { workflowId: `bare-${job.id}`, taskQueue: taskQueue!, args: [job] })
        .then(
          () => stats.started++,
          () => stats.startFailures++,
        )
        .finally(() => {
          lanes--;
          pumpStarts();
        });
    }
    stats.queued = starts.length;
  };

  app.post('/v1/tasks/:taskId/events', async (req, res) => {
    const taskId = req.params.taskId;
    const body = JSON.parse(req.body as string) as { streamResponse: unknown };
    const tx = await db.connect();
    try {
      await tx.query('BEGIN');
      const ev = await tx.query<{ id: string; created_at: Date }>(
        'INSERT INTO task_events (tenant_id, task_id, kind, body) VALUES ($1, $2, $3, $4) RETURNING id, created_at',
        [tenantId, taskId, 'statusUpdate', JSON.stringify(body.streamResponse)],
      );
      const configs = await tx.query<{ row_id: string; id: string }>(
        `SELECT row_id, id FROM push_configs WHERE tenant_id = $1 AND task_id = $2 AND deleted_at IS NULL AND status = 'active' FOR UPDATE`,
        [tenantId, taskId],
      );
      const ids = configs.rows.map(() => crypto.randomUUID());
      await tx.query(
        `INSERT INTO delivery_jobs (id, tenant_id, event_id, config_row_id, task_id, config_id, deadline)
         SELECT j.id, $1, $2, j.row_id, $3, j.config_id, now() + interval '24 hours'
           FROM unnest($4::uuid[], $5::bigint[], $6::text[]) AS j (id, row_id, config_id)`,
        [
          tenantId,
          ev.rows[0]!.id,
          taskId,
          ids,
          configs.rows.map((c) => c.row_id),
          configs.rows.map((c) => c.id),
        ],
      );
      await tx.query('COMMIT');
      res.status(202).json({
        eventId: ev.rows[0]!.id,
        deliveries: ids.map((id, i) => ({ id, configId: configs.rows[i]!.id })),
      });
      if (client) {
        for (const id of ids) starts.push({ id, taskId });
        pumpStarts();
      }
    } catch (err) {
      await tx.query('ROLLBACK').catch(() => undefined);
      res.status(500).json({ error: (err as Error).message });
    } finally {
      tx.release();
    }
  });

  app.post('/a2a/push/:registrationId', async (req, res) => {
    try {
      const text = req.body as string;
      const v = JSON.parse(text) as { statusUpdate?: { taskId?: string } };
      await db.query(
        'INSERT INTO inbox_callbacks (registration_id, body_task_id, kind, body) VALUES ($1, $2, $3, $4)',
        [req.params.registrationId, v.statusUpdate?.taskId ?? null, 'statusUpdate', text],
      );
      res.status(200).json({ status: 'accepted' });
    } catch (err) {
      res.status(500).json({ error: (err as Error).message });
    }
  });

  const batched = new GroupCommit<{ registrationId: string; taskId: string | null; body: string }, null>(
    async (items) => {
      await db.query(
        `INSERT INTO inbox_callbacks (registration_id, body_task_id, kind, body)
         SELECT r, t, 'statusUpdate', b FROM unnest($1::uuid[], $2::text[], $3::text[]) AS x (r, t, b)`,
        [items.map((i) => i.registrationId), items.map((i) => i.taskId), items.map((i) => i.body)],
      );
      return items.map(() => null);
    },
    STORE_WRITES_IN_FLIGHT,
    STORE_BATCH_MAX,
  );
  app.post('/a2a/push-batched/:registrationId', async (req, res) => {
    try {
      const text = req.body as string;
      const v = JSON.parse(text) as { statusUpdate?: { taskId?: string } };
      await batched.submit({
        registrationId: req.params.registrationId,
        taskId: v.statusUpdate?.taskId ?? null,
        body: text,
      });
      res.status(200).json({ status: 'accepted' });
    } catch (err) {
      res.status(500).json({ error: (err as Error).message });
    }
  });

  app.get('/stats', (_req, res) => {
    res.json({ ...stats, queued: starts.length });
  });

  const server = app.listen(0, '127.0.0.1', () => {
    process.stdout.write(`READY ${(server.address() as { port: number }).port}\n`);
  });
  process.on('SIGTERM', () => {
    server.close();
    server.closeAllConnections();
    void Promise.all([db.end(), connection?.close()]).then(() => process.exit(0));
  });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
