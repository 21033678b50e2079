/**
 * TEST_DELIVERY_WORKFLOW in the test run's environment (`classic` or `lean`): the delivery workflow
 * type of every stack and service process whose test does not name its own, so that the whole suite,
 * or the fault suite, runs under the type that is not the default (`TEST_DELIVERY_WORKFLOW=classic
 * npm run test:faults`). Unset: the service's default.
 */
export function testDeliveryWorkflow(): { DELIVERY_WORKFLOW?: string } {
  const kind = process.env.TEST_DELIVERY_WORKFLOW;
  if (kind === undefined || kind === '') return {};
  if (kind !== 'classic' && kind !== 'lean')
    throw new Error(`TEST_DELIVERY_WORKFLOW: classic or lean, not ${kind}`);
  return { DELIVERY_WORKFLOW: kind };
}
