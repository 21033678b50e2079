import { proxyActivities } from '@temporalio/workflow';
import type { BareActivities } from './bare-worker';

const { postOnce } = proxyActivities<BareActivities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', backoffCoefficient: 2 },
});

/** Baseline (a): the least a Temporal delivery can be — one workflow, one activity that POSTs. */
export async function bareDelivery(input: { taskId: string; id: string }): Promise<void> {
  await postOnce(input);
}
