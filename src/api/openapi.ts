import { z } from 'zod';
import { PROBLEM_STATUS } from '../http/problem';
import {
  auditPage,
  configPage,
  deliveryPage,
  deliveryResponse,
  eventAccepted,
  feedPage,
  pushConfigResponse,
  registrationCreated,
  registrationResponse,
} from './responses';
import {
  auditQuery,
  configListQuery,
  createConfigBody,
  createRegistrationBody,
  emptyBody,
  eventBody,
  feedQuery,
  configIdParam,
  INPUT_EXAMPLES,
  pageQuery,
  QUERY_INTEGER,
  remoteTaskBody,
  taskIdParam,
  uuidParam,
} from './schemas';
import { VERSION } from '../version';

/** The 4xx an operation answers besides the ones every route or every POST answers (see `responsesOf`). */
type OwnError = 400 | 404 | 409;

interface Link {
  operationId: string;
  parameters: Record<string, string>;
  /** Runtime expressions inside it are evaluated too (a body that must name the path's task). */
  requestBody?: unknown;
  description: string;
}

export interface Operation {
  operationId: string;
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
          requestBody: {
            streamResponse: {
              statusUpdate: { taskId: '$request.path.taskId', status: { state: 'TASK_STATE_WORKING' } },
            },
          },
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
    method: 'get',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs/{configId}',
    summary: 'Get one push config',
    params: taskIds,
    success: { status: 200, description: 'the config', schema: pushConfigResponse },
    errors: { 400: 'bad taskId or configId', 404: 'no such live config of the tenant' },
  },
  {
    operationId: 'deletePushConfig',
    method: 'delete',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs/{configId}',
    summary: 'Delete a push config (idempotent)',
    params: taskIds,
    success: { status: 204, description: 'deleted, or absent' },
    errors: { 400: 'bad taskId or configId' },
  },
  {
    operationId: 'listConfigDeliveries',
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
    method: 'get',
    path: '/v1/pushNotificationConfigs',
    summary: "The tenant's push configs across tasks, oldest first",
    query: configListQuery,
    success: { status: 200, description: '{configs, nextPageToken?}', schema: configPage },
    errors: { 400: 'bad status, pageSize or pageToken' },
  },
  {
    operationId: 'writeTaskEvent',
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
    method: 'get',
    path: '/v1/registrations/{id}',
    summary: 'Get a registration',
    params: { id: uuidParam },
    success: { status: 200, description: 'the registration', schema: registrationResponse },
    errors: { 404: 'no such registration of the tenant' },
  },
  {
    operationId: 'deleteRegistration',
    method: 'delete',
    path: '/v1/registrations/{id}',
    summary: 'Delete a registration (idempotent)',
    params: { id: uuidParam },
    success: { status: 204, description: 'deleted, or absent' },
    errors: {},
  },
  {
    operationId: 'readResolutions',
    method: 'get',
    path: '/v1/resolutions',
    summary: "The tenant's resolutions feed (long-poll with wait)",
    query: feedQuery,
    success: { status: 200, description: '{items, nextCursor}', schema: feedPage },
    errors: { 400: 'bad after, limit or wait' },
  },
  {
    operationId: 'readAudit',
    method: 'get',
    path: '/v1/audit',
    summary: "The tenant's audit rows",
    query: auditQuery,
    success: { status: 200, description: '{items, nextCursor}', schema: auditPage },
    errors: { 400: 'bad after or limit' },
  },
];

/**
 * JSON Schema of a zod schema: the request side for requests, the answer side for answers. Meta that
 * schemas.ts sets for the document is applied here: request examples, and integer query parameters.
 */
const jsonSchema = (s: z.ZodType, io: 'input' | 'output') => {
  const j = z.toJSONSchema(s, {
    io,
    unrepresentable: 'any',
    override: (ctx) => {
      const js = ctx.jsonSchema as Record<string, unknown>;
      const integer = js[QUERY_INTEGER];
      if (integer) {
        for (const k of Object.keys(js)) delete js[k];
        Object.assign(js, integer);
      }
      if (js[INPUT_EXAMPLES]) {
        js.examples = js[INPUT_EXAMPLES];
        delete js[INPUT_EXAMPLES];
      }
    },
  }) as Record<string, unknown>;
  delete j.$schema;
  return j;
};

const header = (description: string, schema: Record<string, unknown>, required = true) => ({
  description,
  required,
  schema,
});
const REQUEST_ID = header('the request id (a valid X-Request-Id sent is kept)', {
  type: 'string',
  minLength: 1,
});

const problem = (description: string, headers: Record<string, unknown> = {}) => ({
  description,
  headers: { 'X-Request-Id': { $ref: '#/components/headers/RequestId' }, ...headers },
  content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
});

/** Every status an operation can answer, from the order of checks in app.ts and the route itself. */
function responsesOf(op: Operation): Record<string, unknown> {
  const s = op.success;
  const responses: Record<string, unknown> = {
    [s.status]: {
      description: s.description,
      headers: {
        'X-Request-Id': { $ref: '#/components/headers/RequestId' },
        ...(op.method === 'post'
          ? { 'Idempotent-Replayed': { $ref: '#/components/headers/IdempotentReplayed' } }
          : {}),
      },
      ...(s.schema ? { content: { 'application/json': { schema: jsonSchema(s.schema, 'output') } } } : {}),
      ...(s.links ? { links: s.links } : {}),
    },
  };
  const own = { ...op.errors };
  if (op.method === 'post') own[400] ??= 'validation (body, or an Idempotency-Key not of 1-255 characters)';
  for (const [status, description] of Object.entries(own)) responses[status] = problem(description);
  responses['401'] = problem('missing or invalid API key', {
    'WWW-Authenticate': header('the Bearer challenge', { type: 'string', pattern: '^Bearer' }),
  });
  if (op.method === 'post') {
    responses['413'] = problem('the body is larger than 1 MiB');
    responses['415'] = problem('a body that is not application/json or application/a2a+json (UTF-8)');
    responses['422'] = problem('the Idempotency-Key was used for a different request');
  }
  responses['503'] = problem('the database is unavailable', {
    'Retry-After': header('seconds to wait', { type: 'string', pattern: '^\\d+$' }),
  });
  return Object.fromEntries(Object.entries(responses).sort(([a], [b]) => Number(a) - Number(b)));
}

/** OpenAPI 3.1, generated from the zod schemas that validate the requests and shape the answers. */
export function openApiDocument() {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of OPERATIONS) {
    const params = Object.entries(op.params ?? {}).map(([name, s]) => ({
      name,
      in: 'path',
      required: true,
      schema: jsonSchema(s, 'input'),
    }));
    const query = op.query
      ? Object.entries(op.query.shape).map(([name, s]) => ({
          name,
          in: 'query',
          required: false,
          schema: jsonSchema(s as z.ZodType, 'input'),
        }))
      : [];
    const body = op.body ? jsonSchema(op.body, 'input') : undefined;
    paths[op.path] ??= {};
    paths[op.path]![op.method] = {
      operationId: op.operationId,
      summary: op.summary,
      parameters: [
        ...params,
        ...query,
        ...(op.method === 'post'
          ? [
              {
                name: 'Idempotency-Key',
                in: 'header',
                required: false,
                description:
                  'a repeat with the same method, path and body within 24 h gets the stored answer',
                schema: { type: 'string', minLength: 1, maxLength: 255 },
              },
            ]
          : []),
      ],
      ...(body
        ? {
            requestBody: {
              required: !op.bodyOptional,
              content: { 'application/json': { schema: body }, 'application/a2a+json': { schema: body } },
            },
          }
        : {}),
      responses: responsesOf(op),
      security: [{ bearer: [] }],
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'a2a-push management API',
      version: VERSION,
      description:
        'Checks run in this order on /v1: API key (401), route and method (404, 405 with Allow), size (413), ' +
        'media type (415), then the request (400). Rules JSON Schema cannot state are checked by the ' +
        "service: the address guard on URLs (400 guard_refused with its rule), a body taskId equal to the path's.",
    },
    servers: [{ url: '/' }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      headers: {
        RequestId: REQUEST_ID,
        IdempotentReplayed: header(
          'present on a stored answer replayed for a repeated Idempotency-Key',
          { type: 'string', enum: ['true'] },
          false,
        ),
      },
      schemas: {
        Problem: {
          type: 'object',
          required: ['type', 'title', 'status', 'detail'],
          properties: {
            type: {
              type: 'string',
              enum: Object.keys(PROBLEM_STATUS).map((n) => `urn:a2a-push:problem:${n}`),
            },
            title: { type: 'string' },
            status: { type: 'integer', enum: [...new Set(Object.values(PROBLEM_STATUS))] },
            detail: { type: 'string' },
            rule: { type: 'string' },
            errors: {
              type: 'array',
              items: {
                type: 'object',
                required: ['path', 'message'],
                properties: { path: { type: 'string' }, message: { type: 'string' } },
                additionalProperties: false,
              },
            },
          },
          additionalProperties: false,
        },
      },
    },
  };
}
