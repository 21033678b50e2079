import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { Db } from '../db/pool';
import { signalRegistration } from './client';

/**
 * Starts the registrations whose workflow start was lost (Temporal away at creation, or a crash): the
 * sweep's part for the receiver side. Each on its own: one that fails does not hold the others back;
 * three failing in a row (Temporal away, most likely) end the pass rather than wait out every call's
 * timeout. The failed and the untried wait for the next sweep. Answers how many it started.
 */
export async function startLostRegistrations(
  db: Db,
  client: Client,
  taskQueue: string,
  logger: Logger,
): Promise<number> {
  const r = await db.query<{
    id: string;
    tenant_id: string;
    agent_url: string;
    remote_task_id: string | null;
  }>(
    `SELECT id, tenant_id, agent_url, remote_task_id FROM registrations
      WHERE NOT workflow_started AND status IN ('pending', 'active') AND created_at < now() - interval '2 seconds'
      ORDER BY created_at LIMIT 100`,
  );
  let started = 0;
  let failed = 0;
  let inRow = 0;
  let error: unknown;
  for (const reg of r.rows) {
    if (inRow >= 3) break;
    try {
      // A registration whose remote task id was posted while Temporal was away needs that signal: a
      // run waiting for the id wakes only on it (and it is harmless to a run that has the id).
      await signalRegistration(client, taskQueue, reg, reg.remote_task_id ? 'remoteTask' : 'callback');
      await db.query('UPDATE registrations SET workflow_started = true WHERE id = $1', [reg.id]);
      started++;
      inRow = 0;
    } catch (err) {
      failed++;
      inRow++;
      error ??= err;
    }
  }
  if (failed > 0)
    logger.warn(
      { err: error instanceof Error ? error.message : String(error), failed },
      'starting registration workflows failed; the sweep retries',
    );
  return started;
}
