import { z } from 'zod';
import { isValidId } from '../ids';
import { STREAM_RESPONSE_KINDS } from '../stream-response';

export const idSchema = z
  .string()
  .refine(isValidId, { message: 'must be 1-128 characters of [A-Za-z0-9._~:-], not "." or ".."' });

const cursor = z.string().regex(/^\d{1,18}$/, { message: 'must be a cursor (a decimal string)' });

export const pageQuery = z.object({
  pageSize: z
    .string()
    .regex(/^\d+$/, { message: 'must be an integer from 1 to 100' })
    .transform(Number)
    .pipe(
      z
        .number()
        .int()
        .min(1, { message: 'must be from 1 to 100' })
        .max(100, { message: 'must be from 1 to 100' }),
    )
    .optional()
    .default(50),
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
      .transform(() => 'Bearer' as const),
    credentials: z.string().min(1, { message: 'must not be empty' }).max(8192),
  })
  .strict();

export const createConfigBody = z
  .object({
    id: idSchema.optional(),
    taskId: z.string().optional(),
    tenant: z.unknown().optional(),
    url: z.string({ message: 'is required (an https URL)' }),
    token: z.string().max(8192).optional(),
    authentication: authenticationSchema.optional(),
  })
  .strict();

/** The inner fields of a StreamResponse are checked by validateStreamResponse, shared with the inbox. */
export const eventBody = z
  .object({
    streamResponse: z.unknown().refine((v) => v !== undefined, {
      message: `is required (one of ${STREAM_RESPONSE_KINDS.join(', ')})`,
    }),
  })
  .strict();

export const emptyBody = z.object({}).strict();

export const createRegistrationBody = z
  .object({
    agent: z
      .object({
        url: z.string({ message: "is required (the agent's A2A base URL)" }),
        bearerToken: z.string().min(1, { message: 'must not be empty' }).max(8192).optional(),
      })
      .strict(),
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
  });

export const remoteTaskBody = z.object({ remoteTaskId: z.string().min(1).max(1024) }).strict();

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
    .default(def);

export const feedQuery = z.object({
  after: cursor.optional().default('0'),
  limit: intParam('limit', 1, 1000, 100),
  wait: intParam('wait', 0, 30, 0),
});

export const auditQuery = z.object({
  after: cursor.optional().default('0'),
  limit: intParam('limit', 1, 1000, 100),
});
