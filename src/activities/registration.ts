import { ApplicationFailure } from '@temporalio/activity';
import type { Logger } from 'pino';
import { inSpan } from '../tracing';
import { contextLogger } from '../request-context';
import {
  connectRemoteAgent,
  INTERRUPTED_STATES,
  TERMINAL_STATES,
  type RemoteAgent,
  type RemoteFailure,
} from '../a2a';
import { callbackUrl, hostOf } from '../ids';
import { targetOf, type HostSlots } from '../db/slots';
import { audit } from '../db/audit';
import type { Db, Tx } from '../db/pool';
import { inTx } from '../db/pool';
import { appendFeedItem, markCallbacksProcessed, type RegistrationRow } from '../db/registrations';
import type { OutboundClient } from '../outbound';
import { newCallbackCredential } from '../sealing/callback';
import type { Keyring } from '../sealing/keyring';
import { unsealSecret } from '../sealing/secrets';

export interface RegistrationDeps {
  db: Db;
  keyring: Keyring;
  http: OutboundClient;
  logger: Logger;
  publicBaseUrl: string;
  pollInitialMs: number;
  pollMaxMs: number;
  maxAgeMs: number;
  /** The host slots pushes use too: agent calls count against their target's bound. */
  slots: HostSlots;
  /** Wakes delivery workflows granted a slot this call freed. */
  wake: (jobIds: string[]) => Promise<void>;
}

/** How soon an agent call whose target is full asks again (an activity retry: no worker slot meanwhile). */
export const AGENT_SLOT_RETRY_MS = 2_000;

export interface RegistrationInfo {
  status: string;
  remoteTaskKnown: boolean;
  /** The remote task id once known (an id, for the TaskId search attribute). */
  remoteTaskId?: string;
  needsRemoteConfig: boolean;
  pollInitialMs: number;
  pollMaxMs: number;
  /** Epoch ms after which the registration ends `failed` with `expired`. */
  expiresAt: number;
}

export interface ReconcileResult {
  /** The registration reached resolved or failed (or was deleted meanwhile): the workflow ends. */
  ended: boolean;
  status: string;
  remoteTaskId?: string;
  remoteState?: string;
  reason?: string;
  /** The call failed in a way the next poll may repair. */
  transient?: string;
  /**
   * Callbacks stored while the call ran are still unprocessed: the workflow reconciles again soon. The
   * inbox signals a registration only for its first unprocessed callback, so this is what covers the
   * ones that arrive while a GetTask is under way.
   */
  morePending?: boolean;
}

const FAILURE_REASON: Record<
  Exclude<RemoteFailure['kind'], 'transient' | 'push_not_supported'>,
  (f: RemoteFailure) => string
> = {
  task_not_found: () => 'remote_task_not_found',
  auth_failed: () => 'remote_auth_failed',
  guard_refused: (f) => `guard_refused:${(f as { rule: string }).rule}`,
};

export const createRegistrationActivities = (deps: RegistrationDeps) => {
  const { db, logger } = deps;

  async function row(id: string, tx: Tx | Db = db): Promise<RegistrationRow | undefined> {
    return (await tx.query<RegistrationRow>('SELECT * FROM registrations WHERE id = $1', [id])).rows[0];
  }

  /**
   * Runs an agent call in a slot at the agent's target (OUTBOUND_HOST_CONCURRENCY, shared with pushes).
   * A full target fails the activity with a retryable `HostBusy` that Temporal retries after
   * AGENT_SLOT_RETRY_MS, so the wait holds no worker slot; its place in line is kept meanwhile.
   */
  async function atAgent<T>(r: RegistrationRow, fn: (agent: RemoteAgent) => Promise<T>): Promise<T> {
    const target = targetOf(r.agent_url);
    const holder = `reg:${r.id}`;
    const slot = await deps.slots.acquire(target, holder, r.tenant_id, 'agent');
    if (slot.granted.length > 0) void deps.wake(slot.granted).catch(() => undefined);
    if (!slot.acquired)
      throw ApplicationFailure.create({
        type: 'HostBusy',
        message: `waiting for a slot at host ${hostOf(r.agent_url)}`,
        nextRetryDelay: AGENT_SLOT_RETRY_MS,
      });
    try {
      return await deps.slots.holding(target, holder, async () => fn(await agentFor(r)));
    } finally {
      const granted = await deps.slots.release(target, holder, 'neutral').catch(() => []);
      if (granted.length > 0) void deps.wake(granted).catch(() => undefined);
    }
  }

  async function agentFor(r: RegistrationRow): Promise<RemoteAgent> {
    const bearerToken = r.agent_token_id ? await unsealSecret(db, deps.keyring, r.agent_token_id) : undefined;
    return connectRemoteAgent({
      http: deps.http,
      agentUrl: r.agent_url,
      ...(bearerToken ? { bearerToken } : {}),
    });
  }

  /** Ends a registration `failed` with its one terminal feed item. False when it had already ended. */
  async function fail(tx: Tx, r: RegistrationRow, reason: string): Promise<boolean> {
    const u = await tx.query(
      `UPDATE registrations SET status = 'failed', reason = $2, resolved_at = now()
        WHERE id = $1 AND status IN ('pending', 'active')`,
      [r.id, reason],
    );
    if (!u.rowCount) return false;
    await markCallbacksProcessed(tx, r.id);
    await appendFeedItem(tx, {
      tenantId: r.tenant_id,
      registrationId: r.id,
      remoteTaskId: r.remote_task_id,
      kind: 'failed',
      reason,
      terminal: true,
    });
    await audit(tx, {
      tenantId: r.tenant_id,
      actor: 'system',
      action: 'registration.status_changed',
      objectType: 'registration',
      objectId: r.id,
      before: r.status,
      after: `failed (${reason})`,
    });
    return true;
  }

  async function loadRegistration({ registrationId }: { registrationId: string }): Promise<RegistrationInfo> {
    const r = await row(registrationId);
    if (!r)
      return {
        status: 'deleted',
        remoteTaskKnown: false,
        needsRemoteConfig: false,
        pollInitialMs: deps.pollInitialMs,
        pollMaxMs: deps.pollMaxMs,
        expiresAt: 0,
      };
    return {
      status: r.status,
      remoteTaskKnown: r.remote_task_id !== null,
      ...(r.remote_task_id !== null ? { remoteTaskId: r.remote_task_id } : {}),
      needsRemoteConfig:
        r.mode === 'separate' && !r.remote_config_made && r.push_enabled && r.reason === null,
      pollInitialMs: deps.pollInitialMs,
      pollMaxMs: deps.pollMaxMs,
      expiresAt: r.created_at.getTime() + deps.maxAgeMs,
    };
  }

  /**
   * separate mode: a fresh callback credential (its hash stored first), then CreateTaskPushNotificationConfig
   * with the registration id as the config's explicit id. A retry of this activity makes a fresh credential.
   */
  async function setupRemotePushConfig({
    registrationId,
  }: {
    registrationId: string;
  }): Promise<{ pushEnabled: boolean; reason?: string }> {
    const r = await row(registrationId);
    if (!r || r.status !== 'active' || !r.remote_task_id) return { pushEnabled: false };
    const cred = newCallbackCredential();
    await db.query('UPDATE registrations SET callback_hash = $2 WHERE id = $1', [r.id, cred.hash]);
    const taskId = r.remote_task_id;
    const res = await atAgent(r, (agent) =>
      agent.createPushConfig(taskId, {
        id: r.id,
        url: callbackUrl(deps.publicBaseUrl, r.id),
        credentials: cred.credential,
      }),
    );
    if (res.ok) {
      await db.query('UPDATE registrations SET remote_config_made = true WHERE id = $1', [r.id]);
      return { pushEnabled: true };
    }
    const f = res.failure;
    if (f.kind === 'guard_refused') {
      await inTx(db, (tx) => fail(tx, r, FAILURE_REASON.guard_refused(f)));
      return { pushEnabled: false, reason: FAILURE_REASON.guard_refused(f) };
    }
    // Polling alone tracks the task from here on.
    const reason = f.kind === 'push_not_supported' ? 'push_not_supported' : 'remote_config_failed';
    await db.query(
      `UPDATE registrations SET push_enabled = false, reason = $2 WHERE id = $1 AND status = 'active'`,
      [r.id, reason],
    );
    contextLogger(logger).info(
      { registrationId, reason, failure: f.kind },
      'remote push config not created; polling only',
    );
    return { pushEnabled: false, reason };
  }

  /** GetTask on the remote agent; records the state; marks processed the callbacks stored before the call. */
  async function reconcile({ registrationId }: { registrationId: string }): Promise<ReconcileResult> {
    const r = await row(registrationId);
    if (!r) return { ended: true, status: 'deleted' };
    if ((r.status !== 'pending' && r.status !== 'active') || !r.remote_task_id)
      return { ended: r.status !== 'pending' && r.status !== 'active', status: r.status };
    const before = await db.query<{ max: string | null; traceparents: string[] | null }>(
      `SELECT max(id) AS max, array_agg(traceparent) FILTER (WHERE traceparent IS NOT NULL) AS traceparents
         FROM inbox_callbacks WHERE registration_id = $1 AND processed_at IS NULL`,
      [r.id],
    );
    const upTo = before.rows[0]?.max ?? null;
    // Tracing on: the GetTask that covers the callbacks stored before it links to each of them (a
    // reconcile joins callbacks of many traces, as the group commit and the coalesced signal do).
    const remoteTaskId = r.remote_task_id;
    const res = await inSpan(
      'reconcile',
      { links: before.rows[0]?.traceparents ?? [], attributes: { 'a2a_push.registration_id': r.id } },
      () => atAgent(r, (agent) => agent.getTask(remoteTaskId)),
    );
    const base = { remoteTaskId: r.remote_task_id };
    if (!res.ok) {
      const f = res.failure;
      if (f.kind === 'transient' || f.kind === 'push_not_supported')
        return {
          ended: false,
          status: r.status,
          ...base,
          ...(r.remote_state ? { remoteState: r.remote_state } : {}),
          transient: f.kind === 'transient' ? f.detail : f.kind,
        };
      const reason = FAILURE_REASON[f.kind](f);
      const ended = await inTx(db, (tx) => fail(tx, r, reason));
      return {
        ended: true,
        status: ended ? 'failed' : ((await row(r.id))?.status ?? 'deleted'),
        ...base,
        reason,
      };
    }
    const observed = res.value.state;
    return inTx(db, async (tx) => {
      const cur = (
        await tx.query<RegistrationRow>('SELECT * FROM registrations WHERE id = $1 FOR UPDATE', [r.id])
      ).rows[0];
      if (!cur || (cur.status !== 'pending' && cur.status !== 'active'))
        return { ended: true, status: cur?.status ?? 'deleted', ...base };
      const terminal = TERMINAL_STATES.includes(observed);
      const entered = observed !== cur.remote_state;
      // Callbacks are released (the bound counters' triggers lock the inbox_total row) before the feed
      // item takes the tenant's feed lock, on every path (fail() too): one lock order, no deadlock.
      if (terminal) await markCallbacksProcessed(tx, cur.id);
      else if (upTo !== null) await markCallbacksProcessed(tx, cur.id, upTo);
      if (entered && (terminal || INTERRUPTED_STATES.includes(observed)))
        await appendFeedItem(tx, {
          tenantId: cur.tenant_id,
          registrationId: cur.id,
          remoteTaskId: cur.remote_task_id,
          kind: 'state',
          state: observed,
          terminal,
        });
      if (terminal) {
        await tx.query(
          `UPDATE registrations SET remote_state = $2, status = 'resolved', resolved_at = now() WHERE id = $1`,
          [cur.id, observed],
        );
        await audit(tx, {
          tenantId: cur.tenant_id,
          actor: 'system',
          action: 'registration.status_changed',
          objectType: 'registration',
          objectId: cur.id,
          before: cur.status,
          after: `resolved (${observed})`,
        });
        return { ended: true, status: 'resolved', ...base, remoteState: observed };
      }
      if (entered)
        await tx.query('UPDATE registrations SET remote_state = $2 WHERE id = $1', [cur.id, observed]);
      // Read under the row lock: a callback stored after this commit sees the count this leaves, so
      // either this run sees it here or the inbox sees the registration's first unprocessed callback.
      // The rows themselves, not the inbox_pending counter: a counter that drifted high (migration 005
      // counted without a lock) must not keep the workflow draining for ever.
      const left = await tx.query<{ more: boolean }>(
        'SELECT EXISTS (SELECT 1 FROM inbox_callbacks WHERE registration_id = $1 AND processed_at IS NULL) AS more',
        [cur.id],
      );
      const morePending = left.rows[0]?.more === true;
      return {
        ended: false,
        status: cur.status,
        ...base,
        remoteState: observed,
        ...(morePending ? { morePending } : {}),
      };
    });
  }

  async function expireRegistration({
    registrationId,
  }: {
    registrationId: string;
  }): Promise<{ ended: boolean; status: string; reason?: string }> {
    const r = await row(registrationId);
    if (!r) return { ended: false, status: 'deleted' };
    const ended = await inTx(db, (tx) => fail(tx, r, 'expired'));
    return ended ? { ended: true, status: 'failed', reason: 'expired' } : { ended: false, status: r.status };
  }

  /** Best effort: deletes the push config we made (or nr-llm embedded) on the remote agent. Never throws. */
  async function removeRemotePushConfig({
    registrationId,
  }: {
    registrationId: string;
  }): Promise<{ removed: boolean }> {
    try {
      const r = await row(registrationId);
      if (!r || !r.remote_task_id) return { removed: false };
      if (r.mode === 'separate' && !r.remote_config_made) return { removed: false };
      const taskId = r.remote_task_id;
      const res = await atAgent(r, (agent) => agent.deletePushConfig(taskId, r.id));
      if (!res.ok)
        contextLogger(logger).info(
          { registrationId, failure: res.failure.kind },
          'remote push config not deleted (best effort)',
        );
      return { removed: res.ok };
    } catch (err) {
      contextLogger(logger).warn(
        { registrationId, err: (err as Error).message },
        'remote push config delete failed (best effort)',
      );
      return { removed: false };
    }
  }

  return { loadRegistration, setupRemotePushConfig, reconcile, expireRegistration, removeRemotePushConfig };
};

export type RegistrationActivities = ReturnType<typeof createRegistrationActivities>;
