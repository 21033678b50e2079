import { z } from 'zod';
import {
  attemptResponse,
  auditItemResponse,
  auditPage,
  callbackAuthentication,
  callbackCounts,
  callbackPushConfig,
  configPage,
  deliveryPage,
  deliveryRef,
  deliveryResponse,
  eventAccepted,
  fieldError,
  maskedAuthentication,
  problemResponse,
  pushConfigResponse,
  registrationAgent,
  registrationCreated,
  registrationResponse,
  resolutionPage,
  resolutionResponse,
  configHealth,
  configEventResponse,
  configEventPage,
} from '../responses';
import {
  agentBody,
  authenticationSchema,
  createConfigBody,
  createRegistrationBody,
  emptyBody,
  eventBody,
  INPUT_EXAMPLES,
  QUERY_INTEGER,
  remoteTaskBody,
  streamResponseSchema,
} from '../schemas';

/*
 * The named schemas of the document (`#/components/schemas/<name>`). Every request body, every answer
 * and every object inside them has a name here, so the clients generated from the document name their
 * classes after them (not after an operation and a status). Two registries, since a request is
 * documented as the client sends it (zod's input side) and an answer as the service writes it (the
 * output side). Their descriptions are set where the schemas are defined (schemas.ts, responses.ts).
 */
type Names = z.core.$ZodRegistry<{ id: string }>;

const named = (entries: Record<string, z.ZodType>): Names => {
  const r = z.registry<{ id: string }>();
  for (const [id, schema] of Object.entries(entries)) r.add(schema, { id });
  return r;
};

export const REQUEST_SCHEMAS = named({
  CreatePushConfig: createConfigBody,
  AuthenticationInfo: authenticationSchema,
  TaskEvent: eventBody,
  StreamResponse: streamResponseSchema,
  RetryDelivery: emptyBody,
  CreateRegistration: createRegistrationBody,
  Agent: agentBody,
  RemoteTask: remoteTaskBody,
});

export const RESPONSE_SCHEMAS = named({
  PushConfig: pushConfigResponse,
  MaskedAuthentication: maskedAuthentication,
  PushConfigPage: configPage,
  TaskEventAccepted: eventAccepted,
  DeliveryRef: deliveryRef,
  Delivery: deliveryResponse,
  Attempt: attemptResponse,
  DeliveryPage: deliveryPage,
  Registration: registrationResponse,
  RegistrationCreated: registrationCreated,
  RegistrationAgent: registrationAgent,
  CallbackCounts: callbackCounts,
  CallbackPushConfig: callbackPushConfig,
  CallbackAuthentication: callbackAuthentication,
  Resolution: resolutionResponse,
  ResolutionPage: resolutionPage,
  ConfigHealth: configHealth,
  ConfigEvent: configEventResponse,
  ConfigEventPage: configEventPage,
  AuditItem: auditItemResponse,
  AuditPage: auditPage,
  Problem: problemResponse,
  FieldError: fieldError,
});

const REF = '#/components/schemas/';

type Json = Record<string, unknown>;

/**
 * What the document shows beyond zod's own conversion: request examples, integer query parameters
 * (schemas.ts sets both as meta), and timestamps as `format: date-time` alone. zod adds the regular
 * expression it checks with, which generated clients test against their own rendering of the parsed
 * date (PHP's `+00:00` for `Z`) and then reject the service's answers; every timestamp the service
 * writes is `Date.toISOString()`, UTC with `Z`, which responses.ts checks.
 */
const override = (ctx: { jsonSchema: unknown }) => {
  const js = ctx.jsonSchema as Json;
  const integer = js[QUERY_INTEGER];
  if (integer) {
    for (const k of Object.keys(js)) delete js[k];
    Object.assign(js, integer);
  }
  if (js[INPUT_EXAMPLES]) {
    js.examples = js[INPUT_EXAMPLES];
    delete js[INPUT_EXAMPLES];
  }
  if (js.format === 'date-time') delete js.pattern;
};

/** JSON Schema of an unnamed schema (a path or query parameter): the request side. */
export function parameterSchema(s: z.ZodType): Json {
  const j = z.toJSONSchema(s, { io: 'input', unrepresentable: 'any', override }) as Json;
  delete j.$schema;
  return j;
}

/** `components.schemas`: both registries, each schema referring to the named ones inside it by `$ref`. */
export function componentSchemas(): Record<string, Json> {
  const out: Record<string, Json> = {};
  for (const [names, io] of [
    [REQUEST_SCHEMAS, 'input'],
    [RESPONSE_SCHEMAS, 'output'],
  ] as const) {
    const { schemas } = z.toJSONSchema(names, {
      io,
      unrepresentable: 'any',
      override,
      uri: (id) => `${REF}${id}`,
    });
    for (const [id, schema] of Object.entries(schemas)) {
      if (id in out) throw new Error(`schema ${id} is named twice`);
      const j = { ...(schema as Json) };
      delete j.$schema;
      delete j.$id;
      out[id] = j;
    }
  }
  return out;
}

/** `{ $ref }` to a named schema; an operation's body or answer must be one (a test walks the rest). */
export function schemaRef(s: z.ZodType, io: 'input' | 'output'): { $ref: string } {
  const id = (io === 'input' ? REQUEST_SCHEMAS : RESPONSE_SCHEMAS).get(s)?.id;
  if (!id)
    throw new Error(`an operation's ${io === 'input' ? 'body' : 'answer'} has no name in components.ts`);
  return { $ref: `${REF}${id}` };
}
