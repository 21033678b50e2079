// What the worker bundles: every workflow of the service.
export { deliveryWorkflow } from './delivery';
export { registrationWorkflow } from './registration';
