import { z } from 'zod';
import type { configView, deliveryView } from '../db/outbox';
import type { feedItemView, registrationView } from '../db/registrations';
import { MASK } from '../sealing/keyring';

/*
 * The answers of the management API, for the OpenAPI document (src/api/openapi.ts). The views in src/db
 * build them; the type checks at the end of this file fail when a view gains a field these schemas
 * lack, and test/unit/openapi.test.ts parses real views with them.
 */

const timestamp = z.iso.datetime();
const cursor = z.string().regex(/^\d+$/);
const uuid = z
  .string()
  .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
  .meta({ format: 'uuid' });

export const CONFIG_STATUSES = ['active', 'auth_failed', 'stopped'] as const;
export const JOB_STATUSES = [
  'queued',
  'in_flight',
  'waiting_retry',
  'delivered',
  'failed',
  'exhausted',
  'expired',
  'cancelled',
  'superseded',
  'auth_failed',
  'stopped',
] as const;
export const ATTEMPT_OUTCOMES = [
  'delivered',
  'retry',
  'auth_failed',
  'stopped',
  'failed',
  'guard_refused',
  'interrupted',
] as const;
export const REGISTRATION_STATUSES = ['pending', 'active', 'resolved', 'failed', 'deleted'] as const;

export const pushConfigResponse = z
  .object({
    id: z.string(),
    taskId: z.string(),
    url: z.string(),
    token: z.string().optional(),
    authentication: z
      .object({ scheme: z.literal('Bearer'), credentials: z.literal(MASK) })
      .strict()
      .optional(),
    status: z.enum(CONFIG_STATUSES),
    statusReason: z.string().optional(),
    createdAt: timestamp,
    statusChangedAt: timestamp,
  })
  .strict();

export const configPage = z
  .object({ configs: z.array(pushConfigResponse), nextPageToken: cursor.optional() })
  .strict();

export const deliveryResponse = z
  .object({
    id: uuid,
    eventId: cursor,
    configId: z.string(),
    taskId: z.string(),
    status: z.enum(JOB_STATUSES),
    reason: z.string().optional(),
    attempts: z.array(
      z
        .object({
          n: z.number().int().min(1),
          startedAt: timestamp,
          durationMs: z.number().int().min(0).optional(),
          outcome: z.enum(ATTEMPT_OUTCOMES).optional(),
          httpStatus: z.number().int().optional(),
          error: z.string().optional(),
          retryAfterMs: z.number().int().min(0).optional(),
        })
        .strict(),
    ),
    nextAttemptAt: timestamp.optional(),
    sequence: z
      .number()
      .int()
      .min(1)
      .optional()
      .describe(
        "X-A2A-Push-Sequence: the event's number in its config's line (a :retry carries the original's)",
      ),
    waitingFor: uuid
      .optional()
      .describe(
        'DELIVERY_ORDER=per_config: the earlier delivery of the same config this queued one waits for',
      ),
    retryOf: uuid.optional().describe('the delivery this one resends (POST /v1/deliveries/{id}:retry)'),
    deadline: timestamp,
    workflowId: z
      .string()
      .optional()
      .describe(
        'the Temporal workflow of this delivery (delivery-{id}); absent while it waits for an earlier delivery of its config, and for one that ended without ever starting one',
      ),
    createdAt: timestamp,
    finishedAt: timestamp
      .optional()
      .describe('when it ended: a final status, and no attempt of it on the wire any more'),
  })
  .strict();

export const deliveryPage = z
  .object({ deliveries: z.array(deliveryResponse), nextPageToken: cursor.optional() })
  .strict();

export const eventAccepted = z
  .object({
    eventId: cursor,
    deliveries: z.array(z.object({ id: uuid, configId: z.string() }).strict()),
  })
  .strict();

export const registrationResponse = z
  .object({
    id: uuid,
    mode: z.enum(['embedded', 'separate']),
    status: z.enum(REGISTRATION_STATUSES),
    agent: z.object({ url: z.string() }).strict(),
    remoteTaskId: z.string().optional(),
    remoteState: z.string().optional(),
    pushEnabled: z.boolean(),
    reason: z.string().optional(),
    callbacks: z
      .object({
        received: z.number().int().min(0),
        pending: z.number().int().min(0),
        late: z.number().int().min(0),
      })
      .strict(),
    createdAt: timestamp,
    resolvedAt: timestamp.optional(),
  })
  .strict();

/** The 201 of an embedded registration adds the config to embed; its credential is shown this once. */
export const registrationCreated = registrationResponse
  .extend({
    pushNotificationConfig: z
      .object({
        id: uuid,
        url: z.string(),
        authentication: z.object({ scheme: z.literal('Bearer'), credentials: z.string() }).strict(),
      })
      .strict()
      .optional(),
  })
  .strict();

export const feedPage = z
  .object({
    items: z.array(
      z
        .object({
          cursor,
          registrationId: uuid,
          remoteTaskId: z.string().optional(),
          kind: z.enum(['state', 'failed']),
          state: z.string().optional(),
          reason: z.string().optional(),
          terminal: z.boolean(),
          observedAt: timestamp,
        })
        .strict(),
    ),
    nextCursor: cursor,
  })
  .strict();

export const auditPage = z
  .object({
    items: z.array(
      z
        .object({
          cursor,
          at: timestamp,
          actor: z.string(),
          action: z.string(),
          objectType: z.string(),
          objectId: z.string(),
          before: z.string().optional(),
          after: z.string().optional(),
        })
        .strict(),
    ),
    nextCursor: cursor,
  })
  .strict();

// A view with a field its schema lacks (or the other way round) fails the type check here.
type SameKeys<A, B> = [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] extends [never, never]
  ? true
  : { onlyInView: Exclude<keyof A, keyof B>; onlyInSchema: Exclude<keyof B, keyof A> };
const sameKeys = <T extends true>(t: T) => t;
sameKeys<SameKeys<ReturnType<typeof configView>, z.output<typeof pushConfigResponse>>>(true);
sameKeys<SameKeys<ReturnType<typeof deliveryView>, z.output<typeof deliveryResponse>>>(true);
sameKeys<
  SameKeys<
    ReturnType<typeof deliveryView>['attempts'][number],
    z.output<typeof deliveryResponse>['attempts'][number]
  >
>(true);
sameKeys<SameKeys<ReturnType<typeof registrationView>, z.output<typeof registrationResponse>>>(true);
sameKeys<SameKeys<ReturnType<typeof feedItemView>, z.output<typeof feedPage>['items'][number]>>(true);
