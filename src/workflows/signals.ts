import { defineQuery, defineSignal } from '@temporalio/workflow';

/**
 * Wakes a delivery that waits for its next attempt (its config was deleted or stopped, its job
 * superseded, or a new event asks its head for an early attempt), for a slot at its target (a slot was
 * granted to it), or for the earlier delivery of its config that held it back (that one ended).
 */
export const wakeSignal = defineSignal('wake');

export interface DeliveryState {
  status: string;
  attempts: number;
  reason?: string;
  nextAttemptInMs?: number;
  /** In line for a slot at this host (OUTBOUND_HOST_CONCURRENCY). */
  waitingForSlot?: string;
  /** Held back by this earlier delivery of its config (DELIVERY_ORDER=per_config). */
  waitingFor?: string;
  lane?: 'slow';
}
export const deliveryStatusQuery = defineQuery<DeliveryState>('status');

/** A callback was stored for the registration: reconcile soon (coalesced by the inbox). */
export const callbackSignal = defineSignal('callback');
/** nr-llm posted the acknowledged remote task id of an embedded registration. */
export const remoteTaskSignal = defineSignal('remoteTask');
/** The registration was deleted: delete the remote config best-effort and end. */
export const deleteSignal = defineSignal('delete');

export interface RegistrationState {
  phase: 'starting' | 'awaiting_task_id' | 'reconciling' | 'draining' | 'waiting' | 'ended';
  remoteState?: string;
  status?: string;
  polls: number;
  nextPollInMs?: number;
}
export const registrationStatusQuery = defineQuery<RegistrationState>('status');
