import { defineQuery, defineSignal } from '@temporalio/workflow';

/** Wakes a delivery that waits for its next attempt (its config was deleted, or its job superseded). */
export const wakeSignal = defineSignal('wake');

export interface DeliveryState {
  status: string;
  attempts: number;
  reason?: string;
  nextAttemptInMs?: number;
}
export const deliveryStatusQuery = defineQuery<DeliveryState>('status');
