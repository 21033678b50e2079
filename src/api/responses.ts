import { z } from 'zod';
import type { configView, deliveryView } from '../db/outbox';
import type { configEventView } from '../db/config-events';
import type { feedItemView, registrationView } from '../db/registrations';
import { MASK } from '../sealing/keyring';
import type { auditItemView } from './audit';
import { PROBLEM_STATUS, type Problem } from '../http/problem';

/*
 * The answers of the management API, for the OpenAPI document (src/api/openapi/). The views in src/db
 * build them; the type checks at the end of this file fail when a view gains a field these schemas
 * lack, and test/unit/openapi.test.ts parses real views with them. Each object here is a named schema
 * of the document (src/api/openapi/components.ts), so a generated client has one class per shape.
 */

/** `Date.toISOString()`: RFC 3339 in UTC with `Z`. The document states `format: date-time` only. */
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

export const maskedAuthentication = z
  .object({ scheme: z.literal('Bearer'), credentials: z.literal(MASK) })
  .strict()
  .describe("A push config's authentication as answered: the credential is always the fixed mask");

export const configHealth = z
  .object({
    lastDeliveredAt: timestamp
      .optional()
      .describe("the config's last 2xx, in workflow time, at most a minute late; absent if none"),
    failingSince: timestamp
      .optional()
      .describe(
        'the end of the first delivery without a 2xx after the last 2xx; absent while the config is healthy',
      ),
    failedJobs: z
      .number()
      .int()
      .min(0)
      .describe(
        'deliveries that ended without a 2xx (failed, exhausted, expired, superseded after an attempt) since the last 2xx',
      ),
  })
  .strict()
  .describe(
    "A config's health: its last 2xx, and how long and how often it has failed since (CONFIG_WARN_AFTER warns in GET /v1/configEvents; CONFIG_FAILING_AFTER stops it)",
  );

export const pushConfigResponse = z
  .object({
    id: z.string(),
    taskId: z.string(),
    url: z.string(),
    token: z.string().optional(),
    authentication: maskedAuthentication.optional(),
    status: z.enum(CONFIG_STATUSES),
    statusReason: z.string().optional(),
    createdAt: timestamp,
    statusChangedAt: timestamp,
    health: configHealth,
  })
  .strict()
  .describe(
    "A stored push config (A2A's TaskPushNotificationConfig plus its status): `auth_failed` and `stopped` configs receive no new deliveries",
  );

export const configPage = z
  .object({ configs: z.array(pushConfigResponse), nextPageToken: cursor.optional() })
  .strict()
  .describe('A page of push configs, oldest first; `nextPageToken` is absent on the last page');

export const attemptResponse = z
  .object({
    n: z.number().int().min(1),
    startedAt: timestamp,
    durationMs: z.number().int().min(0).optional(),
    outcome: z.enum(ATTEMPT_OUTCOMES).optional(),
    httpStatus: z.number().int().optional(),
    error: z.string().optional(),
    retryAfterMs: z.number().int().min(0).optional(),
  })
  .strict()
  .describe('One attempt of a delivery: without an outcome while it is on the wire');

export const deliveryResponse = z
  .object({
    id: uuid,
    eventId: cursor,
    configId: z.string(),
    taskId: z.string(),
    status: z.enum(JOB_STATUSES),
    reason: z.string().optional(),
    attempts: z.array(attemptResponse),
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
  .strict()
  .describe('One delivery of a task event to one push config, with its attempts');

export const deliveryPage = z
  .object({ deliveries: z.array(deliveryResponse), nextPageToken: cursor.optional() })
  .strict()
  .describe("A page of a config's deliveries, newest first; `nextPageToken` is absent on the last page");

export const deliveryRef = z
  .object({ id: uuid, configId: z.string() })
  .strict()
  .describe('A delivery an event write made: its id and the config it goes to');

export const eventAccepted = z
  .object({ eventId: cursor, deliveries: z.array(deliveryRef) })
  .strict()
  .describe('A stored task event and the deliveries it made, one per active config of the task');

export const registrationAgent = z
  .object({ url: z.string() })
  .strict()
  .describe('The remote agent of a registration (its bearer token is never shown)');

export const callbackCounts = z
  .object({
    received: z.number().int().min(0),
    pending: z.number().int().min(0),
    late: z.number().int().min(0),
  })
  .strict()
  .describe(
    "A registration's callbacks: answered 2xx, stored and not yet processed, and late (after the end)",
  );

const registrationShape = {
  id: uuid,
  mode: z.enum(['embedded', 'separate']),
  status: z.enum(REGISTRATION_STATUSES),
  agent: registrationAgent,
  remoteTaskId: z.string().optional(),
  remoteState: z.string().optional(),
  pushEnabled: z.boolean(),
  reason: z.string().optional(),
  callbacks: callbackCounts,
  createdAt: timestamp,
  resolvedAt: timestamp.optional(),
};

export const registrationResponse = z
  .object(registrationShape)
  .strict()
  .describe('A remote task the service waits on for nr-llm');

export const callbackAuthentication = z
  .object({ scheme: z.literal('Bearer'), credentials: z.string() })
  .strict()
  .describe(
    'The callback credential: shown once, in the 201 of an embedded registration (a repeat of the request shows it masked once the registration is no longer pending)',
  );

export const callbackPushConfig = z
  .object({ id: uuid, url: z.string(), authentication: callbackAuthentication })
  .strict()
  .describe(
    "The push config nr-llm puts into SendMessageConfiguration.taskPushNotificationConfig: the registration's id, the callback URL and its credential",
  );

/** The 201 of an embedded registration adds the config to embed; its credential is shown this once. */
export const registrationCreated = z
  .object({ ...registrationShape, pushNotificationConfig: callbackPushConfig.optional() })
  .strict()
  .describe('A registration just made, plus the push config to embed for an embedded one');

export const resolutionResponse = z
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
  .strict()
  .describe(
    "An item of the resolutions feed: a remote task's state entered (`state`) or a registration that ended `failed`",
  );

export const resolutionPage = z
  .object({ items: z.array(resolutionResponse), nextCursor: cursor })
  .strict()
  .describe('A page of the resolutions feed; `nextCursor` equals `after` on an empty page');

export const configEventResponse = z
  .object({
    cursor,
    taskId: z.string(),
    configId: z.string(),
    kind: z
      .enum(['failing', 'recovered', 'auth_failed', 'stopped', 'deleted'])
      .describe(
        '`failing`: failing for CONFIG_WARN_AFTER (once per failing stretch); `recovered`: a 2xx after that warning; `auth_failed`: paused by a 401 or 403; `stopped`: by a 404 or 410, the address guard, or CONFIG_FAILING_AFTER without a 2xx; `deleted`',
      ),
    reason: z
      .string()
      .optional()
      .describe('`http_401`, `http_403`, `http_404`, `http_410`, `guard_refused:<rule>`, `failing`'),
    at: timestamp.describe("when the change happened (workflow time where a delivery's end made it)"),
  })
  .strict()
  .describe("An item of the config events feed: a change of one of the tenant's push configs");

export const configEventPage = z
  .object({ items: z.array(configEventResponse), nextCursor: cursor })
  .strict()
  .describe('A page of the config events feed; `nextCursor` equals `after` on an empty page');

export const auditItemResponse = z
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
  .strict()
  .describe('An audit row: who (an API key id or `system`) did what to which object, and when');

export const auditPage = z
  .object({ items: z.array(auditItemResponse), nextCursor: cursor })
  .strict()
  .describe('A page of audit rows; `nextCursor` equals `after` on an empty page');

export const fieldError = z
  .object({ path: z.string(), message: z.string() })
  .strict()
  .describe('One invalid field: its dotted path (`authentication.scheme`; empty for the whole body)');

export const problemResponse = z
  .object({
    type: z.enum(
      Object.keys(PROBLEM_STATUS).map((n) => `urn:a2a-push:problem:${n}`) as [string, ...string[]],
    ),
    title: z.string(),
    status: z
      .number()
      .int()
      .refine((s) => (Object.values(PROBLEM_STATUS) as number[]).includes(s))
      .meta({ enum: [...new Set(Object.values(PROBLEM_STATUS))] }),
    detail: z.string(),
    rule: z.string().optional().describe('guard_refused: the address guard rule that refused the URL'),
    errors: z.array(fieldError).optional(),
  })
  .strict()
  .describe('An RFC 9457 problem (application/problem+json)');

// A view with a field its schema lacks (or the other way round) fails the type check here.
type SameKeys<A, B> = [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] extends [never, never]
  ? true
  : { onlyInView: Exclude<keyof A, keyof B>; onlyInSchema: Exclude<keyof B, keyof A> };
const sameKeys = <T extends true>(t: T) => t;
sameKeys<SameKeys<ReturnType<typeof configView>, z.output<typeof pushConfigResponse>>>(true);
sameKeys<SameKeys<ReturnType<typeof deliveryView>, z.output<typeof deliveryResponse>>>(true);
sameKeys<SameKeys<ReturnType<typeof deliveryView>['attempts'][number], z.output<typeof attemptResponse>>>(
  true,
);
sameKeys<SameKeys<ReturnType<typeof registrationView>, z.output<typeof registrationResponse>>>(true);
sameKeys<SameKeys<ReturnType<typeof feedItemView>, z.output<typeof resolutionResponse>>>(true);
sameKeys<SameKeys<ReturnType<typeof auditItemView>, z.output<typeof auditItemResponse>>>(true);
sameKeys<SameKeys<ReturnType<typeof configView>['health'], z.output<typeof configHealth>>>(true);
sameKeys<SameKeys<ReturnType<typeof configEventView>, z.output<typeof configEventResponse>>>(true);
sameKeys<SameKeys<ReturnType<Problem['body']>, z.output<typeof problemResponse>>>(true);
