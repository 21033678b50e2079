import type { z } from 'zod';
import { VERSION } from '../../version';
import { componentSchemas, parameterSchema, schemaRef } from './components';
import { OPERATIONS, TAGS, type Operation } from './operations';

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
      ...(s.schema ? { content: { 'application/json': { schema: schemaRef(s.schema, 'output') } } } : {}),
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
      schema: parameterSchema(s),
    }));
    const query = op.query
      ? Object.entries(op.query.shape).map(([name, s]) => ({
          name,
          in: 'query',
          required: false,
          schema: parameterSchema(s as z.ZodType),
        }))
      : [];
    const body = op.body ? schemaRef(op.body, 'input') : undefined;
    paths[op.path] ??= {};
    paths[op.path]![op.method] = {
      operationId: op.operationId,
      tags: [op.tag],
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
    tags: Object.entries(TAGS).map(([name, description]) => ({ name, description })),
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
      schemas: componentSchemas(),
    },
  };
}
