import { proxyActivities } from '@temporalio/workflow';
import type { FairnessProbeActivities } from '../fairness-probe';

const queued = proxyActivities<FairnessProbeActivities>({
  startToCloseTimeout: '1 minute',
  // The activity task goes through the task queue (and its fairness) rather than straight back to
  // the worker that completed the workflow task.
  allowEagerDispatch: false,
});
const eager = proxyActivities<FairnessProbeActivities>({ startToCloseTimeout: '1 minute' });

/** One activity that notes when it ran and the priority Temporal handed it (none set on the activity). */
export async function fairnessProbe(input: { id: string; eager: boolean }): Promise<void> {
  await (input.eager ? eager : queued).probe(input.id);
}
