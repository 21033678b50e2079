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
