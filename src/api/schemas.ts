import { z } from 'zod';
import { isValidId } from '../ids';
import { STREAM_RESPONSE_KINDS } from '../stream-response';

/*
 * These schemas validate the requests and are the source of the OpenAPI document (src/api/openapi/,
 * z.toJSONSchema). A rule that zod checks in code (`refine`) and JSON Schema can state carries the same
 * rule as `meta` beside it, so the document is as strict as the validator; what JSON Schema cannot
 * state (the address guard, "must equal the path's taskId") stays in the route. Each body and each
 * object inside one is a named schema of the document (src/api/openapi/components.ts).
 */

const ID_MESSAGE = 'must be 1-128 characters of [A-Za-z0-9._~:-], not "." or ".."';
export const idSchema = z
  .string()
  .min(1, { message: ID_MESSAGE })
  .max(128, { message: ID_MESSAGE })
  .regex(/^[A-Za-z0-9._~:-]+$/, { message: ID_MESSAGE })
  .refine(isValidId, { message: ID_MESSAGE })
  .meta({ not: { enum: ['.', '..'] } });

/** The path parameters, with the examples the request examples use (the event example names task-42). */
export const taskIdParam = idSchema.meta({ examples: ['task-42'] });
export const configIdParam = idSchema.meta({ examples: ['nr-llm-1'] });

/** Delivery and registration ids are UUIDs the service made; any other value is not found (404). */
export const uuidParam = z
  .string()
  .regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/)
  .meta({ format: 'uuid' });

const cursor = z.string().regex(/^\d{1,18}$/, { message: 'must be a cursor (a decimal string)' });

/**
 * The document shows an integer query parameter as what a client sends (`integer`, its range and
 * default); the validator reads the query string's text. One function writes both.
 */
export const QUERY_INTEGER = 'x-a2a-push-query-integer';
/** Examples of a request (zod's own `examples` are output values, dropped for a schema that transforms). */
export const INPUT_EXAMPLES = 'x-a2a-push-examples';
const intParam = (name: string, min: number, max: number, def: number) =>
  z
    .string()
    .regex(/^\d+$/, { message: `must be an integer from ${min} to ${max}` })
    .transform(Number)
    .pipe(
      z
        .number()
        .int()
        .min(min, { message: `${name} must be from ${min} to ${max}` })
        .max(max, { message: `${name} must be from ${min} to ${max}` }),
    )
    .optional()
    .default(def)
    .meta({ [QUERY_INTEGER]: { type: 'integer', minimum: min, maximum: max, default: def } });

export const pageQuery = z.object({
  pageSize: intParam('pageSize', 1, 100, 50),
  pageToken: cursor.optional().default('0'),
});

export const configListQuery = pageQuery.extend({
  status: z.enum(['active', 'auth_failed', 'stopped']).optional(),
});

export const authenticationSchema = z
  .object({
    scheme: z
      .string()
      .refine((s) => s.toLowerCase() === 'bearer', {
        message: 'unsupported authentication scheme (only Bearer)',
      })
      .meta({ pattern: '^[Bb][Ee][Aa][Rr][Ee][Rr]$' })
      .transform(() => 'Bearer' as const),
    credentials: z.string().min(1, { message: 'must not be empty' }).max(8192),
  })
  .strict()
  .describe(
    "A2A's AuthenticationInfo: the scheme (Bearer, in any case; stored as `Bearer`) and the credential, sealed at rest and never shown again",
  );

/**
 * A push target or agent URL: the address guard (section 4 of the contract) judges it in the route and
 * names its rule in the 400; the document states the part of it JSON Schema can (https, length).
 */
const targetUrl = (message: string) =>
  z.string({ message }).meta({ format: 'uri', pattern: '^https://', maxLength: 2048 });

export const createConfigBody = z
  .object({
    id: idSchema.optional(),
    /** Must equal the path's taskId (checked in the route). */
    taskId: z.string().optional(),
    tenant: z.unknown().optional(),
    url: targetUrl('is required (an https URL)'),
    token: z.string().max(8192).optional(),
    authentication: authenticationSchema.optional(),
  })
  .strict()
  .meta({
    description:
      "A2A's TaskPushNotificationConfig to store: `id` is generated (a UUID) when absent; a `taskId` must equal the path's; `tenant` is ignored",
    [INPUT_EXAMPLES]: [
      {
        id: 'nr-llm-1',
        url: 'https://push.example.com/hook',
        token: 'client-token',
        authentication: { scheme: 'Bearer', credentials: 's3cret-credential' },
      },
    ],
  });

/**
 * validateStreamResponse's rule (shared with the inbox), as JSON Schema: exactly one of the kinds, its
 * value an object whose fields are not checked further.
 */
export const streamResponseSchema = z
  .unknown()
  .refine((v) => v !== undefined, {
    message: `is required (one of ${STREAM_RESPONSE_KINDS.join(', ')})`,
  })
  .meta({
    description:
      "An A2A v1.0 StreamResponse: exactly one of its four members, an object (the task id it names must be the path's)",
    type: 'object',
    properties: Object.fromEntries(STREAM_RESPONSE_KINDS.map((k) => [k, { type: 'object' }])),
    additionalProperties: false,
    minProperties: 1,
    maxProperties: 1,
  });

export const eventBody = z
  .object({ streamResponse: streamResponseSchema })
  .strict()
  .meta({
    description:
      'A task event: one delivery per active config of the task, with the value sent byte for byte',
    [INPUT_EXAMPLES]: [
      { streamResponse: { statusUpdate: { taskId: 'task-42', status: { state: 'TASK_STATE_COMPLETED' } } } },
    ],
  });

export const emptyBody = z
  .object({})
  .strict()
  .meta({ description: 'An empty body (or none)', [INPUT_EXAMPLES]: [{}] });

export const agentBody = z
  .object({
    url: targetUrl("is required (the agent's A2A base URL)"),
    bearerToken: z.string().min(1, { message: 'must not be empty' }).max(8192).optional(),
  })
  .strict()
  .describe(
    "The remote agent: its A2A base URL (the card is read below it) and nr-llm's token for it, sent as Authorization: Bearer on every call and sealed at rest",
  );

export const createRegistrationBody = z
  .object({
    agent: agentBody,
    remoteTaskId: z.string().min(1).max(1024).optional(),
    mode: z.enum(['embedded', 'separate'], { message: 'must be "embedded" or "separate"' }),
  })
  .strict()
  .superRefine((b, ctx) => {
    if (b.mode === 'separate' && b.remoteTaskId === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['remoteTaskId'],
        message: 'is required for a separate registration',
      });
    if (b.mode === 'embedded' && b.remoteTaskId !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['remoteTaskId'],
        message:
          'is refused for an embedded registration (post it to /remote-task once the agent acknowledged the task)',
      });
  })
  .meta({
    description:
      'A remote task to wait on: `embedded` hands back a push config to embed in the message, `separate` (the message was sent) names the remote task',
    // The refinement above, as JSON Schema.
    if: { properties: { mode: { const: 'separate' } } },
    then: { required: ['remoteTaskId'] },
    else: { not: { required: ['remoteTaskId'] } },
    [INPUT_EXAMPLES]: [
      {
        mode: 'embedded',
        agent: { url: 'https://agent.example.com', bearerToken: 'nr-llm-token-for-agent' },
      },
      { mode: 'separate', remoteTaskId: 'rt-1', agent: { url: 'https://agent.example.com' } },
    ],
  });

export const remoteTaskBody = z
  .object({ remoteTaskId: z.string().min(1).max(1024) })
  .strict()
  .meta({
    description: 'The remote task id the agent acknowledged for an embedded registration',
    [INPUT_EXAMPLES]: [{ remoteTaskId: 'rt-1' }],
  });

export const feedQuery = z.object({
  after: cursor.optional().default('0'),
  limit: intParam('limit', 1, 1000, 100),
  wait: intParam('wait', 0, 30, 0),
});

export const auditQuery = z.object({
  after: cursor.optional().default('0'),
  limit: intParam('limit', 1, 1000, 100),
});
