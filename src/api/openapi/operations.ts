import type { z } from 'zod';
import {
  auditPage,
  configPage,
  deliveryPage,
  deliveryResponse,
  eventAccepted,
  pushConfigResponse,
  registrationCreated,
  registrationResponse,
  resolutionPage,
  configEventPage,
} from '../responses';
import {
  auditQuery,
  configIdParam,
  configListQuery,
  createConfigBody,
  createRegistrationBody,
  emptyBody,
  eventBody,
  feedQuery,
  pageQuery,
  remoteTaskBody,
  taskIdParam,
  uuidParam,
} from '../schemas';

/** The 4xx an operation answers besides the ones every route or every POST answers (see `responsesOf`). */
type OwnError = 400 | 404 | 409;

/**
 * An OpenAPI link: parameters only, each a runtime expression. A literal `requestBody` is valid OpenAPI
 * 3.1 but refused by openapi-generator's validator (it wants an expression string), and no expression
 * yields a task event, so the event write's link leaves the body to the client.
 */
interface Link {
  operationId: string;
  parameters: Record<string, string>;
  description: string;
}

/** The groups of operations (a generated client makes one class per tag: PushConfigsApi, …). */
export const TAGS = {
  PushConfigs: "Push configs of nr-llm's tasks (A2A's TaskPushNotificationConfig)",
  Events: 'Task events: the outbox write',
  Deliveries: 'Deliveries and their attempts',
  Registrations: 'Remote tasks the service waits on',
  Resolutions: "The resolutions feed of the tenant's registrations",
  ConfigEvents: "The config events feed: what happened to the tenant's push configs",
  Audit: "The tenant's audit rows",
} as const;

export interface Operation {
  operationId: string;
  tag: keyof typeof TAGS;
  method: 'get' | 'post' | 'delete';
  path: string;
  summary: string;
  /** The path parameters, in path order, with the schema the route validates them with. */
  params?: Record<string, z.ZodType>;
  query?: z.ZodObject;
  body?: z.ZodType;
  /** A POST whose body may be left out (it is then validated as `{}`). */
  bodyOptional?: boolean;
  success: {
    status: 200 | 201 | 202 | 204;
    description: string;
    schema?: z.ZodType;
    links?: Record<string, Link>;
  };
  errors: Partial<Record<OwnError, string>>;
}

const taskIds = { taskId: taskIdParam, configId: configIdParam };

/** Every route of the management API. The OpenAPI test checks this list against the Express app. */
export const OPERATIONS: Operation[] = [
  {
    operationId: 'createPushConfig',
    tag: 'PushConfigs',
    method: 'post',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs',
    summary: 'Create a push config',
    params: { taskId: taskIdParam },
    body: createConfigBody,
    success: {
      status: 201,
      description: 'the stored config (credentials masked)',
      schema: pushConfigResponse,
      links: {
        GetPushConfig: {
          operationId: 'getPushConfig',
          parameters: { taskId: '$request.path.taskId', configId: '$response.body#/id' },
          description: 'read the config just made',
        },
        ListConfigDeliveries: {
          operationId: 'listConfigDeliveries',
          parameters: { taskId: '$request.path.taskId', configId: '$response.body#/id' },
          description: "the config's deliveries",
        },
        WriteTaskEvent: {
          operationId: 'writeTaskEvent',
          parameters: { taskId: '$request.path.taskId' },
          description: 'an event of the same task makes one delivery to this config',
        },
        DeletePushConfig: {
          operationId: 'deletePushConfig',
          parameters: { taskId: '$request.path.taskId', configId: '$response.body#/id' },
          description: 'delete the config just made',
        },
      },
    },
    errors: {
      400: "validation (unknown field, bad id, taskId not the path's), or the address guard refused url (`rule`)",
      409: 'a config with that id is live for the task, or the task has MAX_CONFIGS_PER_TASK configs that are not deleted',
    },
  },
  {
    operationId: 'listPushConfigs',
    tag: 'PushConfigs',
    method: 'get',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs',
    summary: "List a task's push configs, oldest first",
    params: { taskId: taskIdParam },
    query: pageQuery,
    success: {
      status: 200,
      description: '{configs, nextPageToken?} (absent on the last page)',
      schema: configPage,
    },
    errors: { 400: 'bad taskId, pageSize or pageToken' },
  },
  {
    operationId: 'getPushConfig',
    tag: 'PushConfigs',
    method: 'get',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs/{configId}',
    summary: 'Get one push config',
    params: taskIds,
    success: { status: 200, description: 'the config', schema: pushConfigResponse },
    errors: { 400: 'bad taskId or configId', 404: 'no such live config of the tenant' },
  },
  {
    operationId: 'deletePushConfig',
    tag: 'PushConfigs',
    method: 'delete',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs/{configId}',
    summary: 'Delete a push config (idempotent)',
    params: taskIds,
    success: { status: 204, description: 'deleted, or absent' },
    errors: { 400: 'bad taskId or configId' },
  },
  {
    operationId: 'listConfigDeliveries',
    tag: 'Deliveries',
    method: 'get',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs/{configId}/deliveries',
    summary: "A config's deliveries, newest first",
    params: taskIds,
    query: pageQuery,
    success: {
      status: 200,
      description: '{deliveries, nextPageToken?}',
      schema: deliveryPage,
      links: {
        GetDelivery: {
          operationId: 'getDelivery',
          parameters: { id: '$response.body#/deliveries/0/id' },
          description: 'the newest delivery',
        },
      },
    },
    errors: { 400: 'bad taskId, configId, pageSize or pageToken', 404: 'no such live config of the tenant' },
  },
  {
    operationId: 'listTenantPushConfigs',
    tag: 'PushConfigs',
    method: 'get',
    path: '/v1/pushNotificationConfigs',
    summary: "The tenant's push configs across tasks, oldest first",
    query: configListQuery,
    success: { status: 200, description: '{configs, nextPageToken?}', schema: configPage },
    errors: { 400: 'bad status, pageSize or pageToken' },
  },
  {
    operationId: 'writeTaskEvent',
    tag: 'Events',
    method: 'post',
    path: '/v1/tasks/{taskId}/events',
    summary: 'Write a task event: one delivery per active config, in one transaction',
    params: { taskId: taskIdParam },
    body: eventBody,
    success: {
      status: 202,
      description: '{eventId, deliveries}',
      schema: eventAccepted,
      links: {
        GetDelivery: {
          operationId: 'getDelivery',
          parameters: { id: '$response.body#/deliveries/0/id' },
          description: 'the first delivery the event made',
        },
      },
    },
    errors: {
      400: "validation: not a StreamResponse, its task id not the path's, not UTF-8, or a bad taskId",
    },
  },
  {
    operationId: 'getDelivery',
    tag: 'Deliveries',
    method: 'get',
    path: '/v1/deliveries/{id}',
    summary: 'Get one delivery with its attempts',
    params: { id: uuidParam },
    success: {
      status: 200,
      description: 'the delivery',
      schema: deliveryResponse,
      links: {
        RetryDelivery: {
          operationId: 'retryDelivery',
          parameters: { id: '$response.body#/id' },
          description: 'send a finished, undelivered delivery again',
        },
      },
    },
    errors: { 404: 'no such delivery of the tenant (any id that is not one)' },
  },
  {
    operationId: 'retryDelivery',
    tag: 'Deliveries',
    method: 'post',
    path: '/v1/deliveries/{id}:retry',
    summary: 'A new delivery of the same event with a fresh deadline',
    params: { id: uuidParam },
    body: emptyBody,
    bodyOptional: true,
    success: {
      status: 201,
      description: 'the new delivery',
      schema: deliveryResponse,
      links: {
        GetDelivery: {
          operationId: 'getDelivery',
          parameters: { id: '$response.body#/id' },
          description: 'the new delivery',
        },
      },
    },
    errors: {
      400: 'a body that is not {}',
      404: 'no such delivery of the tenant',
      409: 'the delivery is unfinished or delivered, or its config is not active',
    },
  },
  {
    operationId: 'createRegistration',
    tag: 'Registrations',
    method: 'post',
    path: '/v1/registrations',
    summary: 'Register a remote task to wait on',
    body: createRegistrationBody,
    success: {
      status: 201,
      description: 'the registration, plus pushNotificationConfig (shown this once) for embedded',
      schema: registrationCreated,
      links: {
        GetRegistration: {
          operationId: 'getRegistration',
          parameters: { id: '$response.body#/id' },
          description: 'read the registration just made',
        },
        PostRemoteTask: {
          operationId: 'postRemoteTask',
          parameters: { id: '$response.body#/id' },
          description: "an embedded registration's acknowledged remote task id",
        },
        DeleteRegistration: {
          operationId: 'deleteRegistration',
          parameters: { id: '$response.body#/id' },
          description: 'delete the registration just made',
        },
      },
    },
    errors: { 400: 'validation, or the address guard refused agent.url (`rule`)' },
  },
  {
    operationId: 'postRemoteTask',
    tag: 'Registrations',
    method: 'post',
    path: '/v1/registrations/{id}/remote-task',
    summary: "Post an embedded registration's acknowledged remote task id",
    params: { id: uuidParam },
    body: remoteTaskBody,
    success: {
      status: 200,
      description: 'the registration',
      schema: registrationResponse,
      links: {
        GetRegistration: {
          operationId: 'getRegistration',
          parameters: { id: '$response.body#/id' },
          description: 'read it again',
        },
      },
    },
    errors: {
      400: 'validation',
      404: 'no such registration of the tenant',
      409: 'another remote task id, a separate registration, or one no longer pending',
    },
  },
  {
    operationId: 'getRegistration',
    tag: 'Registrations',
    method: 'get',
    path: '/v1/registrations/{id}',
    summary: 'Get a registration',
    params: { id: uuidParam },
    success: { status: 200, description: 'the registration', schema: registrationResponse },
    errors: { 404: 'no such registration of the tenant' },
  },
  {
    operationId: 'deleteRegistration',
    tag: 'Registrations',
    method: 'delete',
    path: '/v1/registrations/{id}',
    summary: 'Delete a registration (idempotent)',
    params: { id: uuidParam },
    success: { status: 204, description: 'deleted, or absent' },
    errors: {},
  },
  {
    operationId: 'readResolutions',
    tag: 'Resolutions',
    method: 'get',
    path: '/v1/resolutions',
    summary: "The tenant's resolutions feed (long-poll with wait)",
    query: feedQuery,
    success: { status: 200, description: '{items, nextCursor}', schema: resolutionPage },
    errors: { 400: 'bad after, limit or wait' },
  },
  {
    operationId: 'readConfigEvents',
    tag: 'ConfigEvents',
    method: 'get',
    path: '/v1/configEvents',
    summary:
      "The tenant's config events feed: failing warnings, recoveries, pauses, stops and deletes of its push configs (long-poll with wait)",
    query: feedQuery,
    success: { status: 200, description: '{items, nextCursor}', schema: configEventPage },
    errors: { 400: 'bad after, limit or wait' },
  },
  {
    operationId: 'readAudit',
    tag: 'Audit',
    method: 'get',
    path: '/v1/audit',
    summary: "The tenant's audit rows",
    query: auditQuery,
    success: { status: 200, description: '{items, nextCursor}', schema: auditPage },
    errors: { 400: 'bad after or limit' },
  },
];
