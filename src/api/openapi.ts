import { z } from 'zod';
import { PROBLEM_STATUS } from './problem';
import {
  auditQuery,
  configListQuery,
  createConfigBody,
  createRegistrationBody,
  eventBody,
  feedQuery,
  pageQuery,
  remoteTaskBody,
} from './schemas';
import { VERSION } from '../version';

interface Operation {
  method: 'get' | 'post' | 'delete';
  path: string;
  summary: string;
  body?: z.ZodType;
  query?: z.ZodObject;
  responses: Record<number, string>;
}

/** Every route of the management API. The OpenAPI test checks this list against the Express app. */
export const OPERATIONS: Operation[] = [
  {
    method: 'post',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs',
    summary: 'Create a push config',
    body: createConfigBody,
    responses: {
      201: 'the stored config',
      409: 'id already live for the task, or the task has MAX_CONFIGS_PER_TASK configs that are not deleted',
    },
  },
  {
    method: 'get',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs',
    summary: "List a task's push configs, oldest first",
    query: pageQuery,
    responses: { 200: '{configs, nextPageToken?}' },
  },
  {
    method: 'get',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs/{configId}',
    summary: 'Get one push config',
    responses: { 200: 'the config', 404: 'absent' },
  },
  {
    method: 'delete',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs/{configId}',
    summary: 'Delete a push config (idempotent)',
    responses: { 204: 'deleted, or absent' },
  },
  {
    method: 'get',
    path: '/v1/tasks/{taskId}/pushNotificationConfigs/{configId}/deliveries',
    summary: "A config's deliveries, newest first",
    query: pageQuery,
    responses: { 200: '{deliveries, nextPageToken?}' },
  },
  {
    method: 'get',
    path: '/v1/pushNotificationConfigs',
    summary: "The tenant's push configs across tasks",
    query: configListQuery,
    responses: { 200: '{configs, nextPageToken?}' },
  },
  {
    method: 'post',
    path: '/v1/tasks/{taskId}/events',
    summary: 'Write a task event: one delivery per active config, in one transaction',
    body: eventBody,
    responses: { 202: '{eventId, deliveries}' },
  },
  {
    method: 'get',
    path: '/v1/deliveries/{id}',
    summary: 'Get one delivery with its attempts',
    responses: { 200: 'the delivery', 404: 'absent' },
  },
  {
    method: 'post',
    path: '/v1/deliveries/{id}:retry',
    summary: 'A new delivery of the same event with a fresh deadline',
    responses: { 201: 'the new delivery', 409: 'unfinished, delivered, or config not active' },
  },
  {
    method: 'post',
    path: '/v1/registrations',
    summary: 'Register a remote task to wait on',
    body: createRegistrationBody,
    responses: { 201: 'the registration (+ pushNotificationConfig for embedded)' },
  },
  {
    method: 'post',
    path: '/v1/registrations/{id}/remote-task',
    summary: "Post an embedded registration's acknowledged remote task id",
    body: remoteTaskBody,
    responses: { 200: 'the registration', 409: 'another id, or a separate registration' },
  },
  {
    method: 'get',
    path: '/v1/registrations/{id}',
    summary: 'Get a registration',
    responses: { 200: 'the registration', 404: 'absent' },
  },
  {
    method: 'delete',
    path: '/v1/registrations/{id}',
    summary: 'Delete a registration (idempotent)',
    responses: { 204: 'deleted, or absent' },
  },
  {
    method: 'get',
    path: '/v1/resolutions',
    summary: "The tenant's resolutions feed (long-poll with wait)",
    query: feedQuery,
    responses: { 200: '{items, nextCursor}' },
  },
  {
    method: 'get',
    path: '/v1/audit',
    summary: "The tenant's audit rows",
    query: auditQuery,
    responses: { 200: '{items, nextCursor}' },
  },
];

const schema = (s: z.ZodType) => {
  const j = z.toJSONSchema(s, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  delete j.$schema;
  return j;
};

const problemRef = {
  content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
};

/** OpenAPI 3.1, generated from the zod schemas that validate the requests. */
export function openApiDocument() {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of OPERATIONS) {
    const params = [...op.path.matchAll(/\{(\w+)\}/g)].map((m) => ({
      name: m[1],
      in: 'path',
      required: true,
      schema: { type: 'string' },
    }));
    const query = op.query
      ? Object.entries(op.query.shape).map(([name, s]) => ({
          name,
          in: 'query',
          required: false,
          schema: schema(s as z.ZodType),
        }))
      : [];
    const responses: Record<string, unknown> = {};
    for (const [status, description] of Object.entries(op.responses))
      responses[status] =
        Number(status) >= 400
          ? { description, ...problemRef }
          : { description, ...(status === '204' ? {} : { content: { 'application/json': {} } }) };
    responses['400'] ??= { description: 'validation or guard refusal', ...problemRef };
    responses['401'] = { description: 'missing or invalid API key', ...problemRef };
    paths[op.path] ??= {};
    paths[op.path]![op.method] = {
      summary: op.summary,
      operationId: `${op.method}${op.path.replace(/[{}:/]+(\w)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`,
      parameters: [
        ...params,
        ...query,
        ...(op.method === 'post'
          ? [
              {
                name: 'Idempotency-Key',
                in: 'header',
                required: false,
                schema: { type: 'string', maxLength: 255 },
              },
            ]
          : []),
      ],
      ...(op.body
        ? {
            requestBody: {
              required: true,
              content: {
                'application/json': { schema: schema(op.body) },
                'application/a2a+json': { schema: schema(op.body) },
              },
            },
          }
        : {}),
      responses,
      security: [{ bearer: [] }],
    };
  }
  return {
    openapi: '3.1.0',
    info: { title: 'a2a-push management API', version: VERSION },
    servers: [{ url: '/' }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
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
            status: { type: 'integer' },
            detail: { type: 'string' },
            rule: { type: 'string' },
            errors: {
              type: 'array',
              items: {
                type: 'object',
                properties: { path: { type: 'string' }, message: { type: 'string' } },
              },
            },
          },
        },
      },
    },
  };
}
