// What the worker bundles: every workflow of the service.
export { deliveryWorkflow, deliveryWorkflowLean } from './delivery';
export { registrationWorkflow } from './registration';
