import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { BareActivities } from './bare-worker';

const { postOnce } = proxyActivities<BareActivities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', backoffCoefficient: 2 },
});

const local = proxyLocalActivities<BareActivities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', backoffCoefficient: 2 },
});

/** Baseline (a): the least a Temporal delivery can be — one workflow, one activity that POSTs. */
export async function bareDelivery(input: { taskId: string; id: string }): Promise<void> {
  await postOnce(input);
}

/**
 * The floor (issue 21): the fewest round trips Temporal's SDK offers for the same delivery — one
 * workflow started eagerly by a client in the worker's process, its POST a local activity, so a
 * delivery is one start and one workflow task completion, with no database of the service's, no api
 * and no checks. What ours cannot beat on the same server: a ratio of ours to (a) above this one's
 * is out of reach.
 */
export async function bareLeanDelivery(input: { taskId: string; id: string }): Promise<void> {
  await local.postOnce(input);
}
