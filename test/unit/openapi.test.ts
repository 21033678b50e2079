import { Registry } from 'prom-client';
import { createApiApp } from '../../src/api/app';
import { openApiDocument, OPERATIONS } from '../../src/api/openapi';
import { auditItemView } from '../../src/api/audit';
import { Problem } from '../../src/http/problem';
import {
  auditPage,
  configPage,
  deliveryResponse,
  problemResponse,
  pushConfigResponse,
  registrationResponse,
  resolutionPage,
} from '../../src/api/responses';
import { idSchema } from '../../src/api/schemas';
import { configView, deliveryView, type AttemptRow, type ConfigRow, type JobRow } from '../../src/db/outbox';
import { feedItemView, registrationView, type RegistrationRow } from '../../src/db/registrations';
import { isValidId } from '../../src/ids';

type Json = Record<string, unknown>;
const at = (doc: Json, path: string, method: string) =>
  (doc.paths as Record<string, Record<string, Json>>)[path]![method]!;
const REF = '#/components/schemas/';
/** The schema a `$ref` names (or the schema itself). */
const deref = (doc: Json, s: Json): Json => {
  const ref = s.$ref as string | undefined;
  if (!ref) return s;
  return ((doc.components as Json).schemas as Record<string, Json>)[ref.slice(REF.length)]!;
};
/** Every object in a subtree of the document, with its JSON pointer. */
function* objectsIn(node: unknown, at: string): Generator<[string, Json]> {
  if (!node || typeof node !== 'object') return;
  if (!Array.isArray(node)) yield [at, node as Json];
  for (const [k, v] of Object.entries(node)) yield* objectsIn(v, `${at}/${k}`);
}

interface Layer {
  route?: { path: string; methods: Record<string, boolean> };
  handle?: { stack?: Layer[] };
}

/** Every (METHOD, path) the Express app serves under /v1, with `:x` written as `{x}`. */
function appRoutes(): Set<string> {
  const app = createApiApp({} as never, new Registry(), async () => ({}));
  const out = new Set<string>();
  const walk = (stack: Layer[]) => {
    for (const l of stack) {
      if (l.route) {
        for (const [m, on] of Object.entries(l.route.methods)) {
          if (!on || m === '_all') continue;
          const path = l.route.path.replace(/:(\w+)/g, '{$1}');
          if (!path.startsWith('/v1/') || path === '/v1/openapi.json') continue;
          // `{id}` and `{id}:retry` share one Express route (one path segment).
          if (path === '/v1/deliveries/{idAction}')
            out.add(m === 'get' ? 'get /v1/deliveries/{id}' : 'post /v1/deliveries/{id}:retry');
          else out.add(`${m} ${path}`);
        }
      } else if (l.handle?.stack) walk(l.handle.stack);
    }
  };
  walk((app as unknown as { router: { stack: Layer[] } }).router.stack);
  return out;
}

describe('OpenAPI document', () => {
  const doc = openApiDocument();
  const documented = new Set(OPERATIONS.map((o) => `${o.method} ${o.path}`));

  it('is OpenAPI 3.1 with every operation under paths', () => {
    expect(doc.openapi).toBe('3.1.0');
    for (const o of OPERATIONS) expect(doc.paths[o.path]?.[o.method]).toBeDefined();
  });

  it('every route of the app is documented, and every documented route exists', () => {
    const routes = appRoutes();
    expect(routes.size).toBeGreaterThanOrEqual(15);
    expect([...routes].filter((r) => !documented.has(r))).toEqual([]);
    expect([...documented].filter((r) => !routes.has(r))).toEqual([]);
  });

  it('request bodies come from the zod schemas that validate them', () => {
    const create = doc.paths['/v1/tasks/{taskId}/pushNotificationConfigs']!.post as {
      requestBody: {
        content: Record<
          string,
          {
            schema: {
              properties: Record<string, unknown>;
              required: string[];
              additionalProperties: boolean;
            };
          }
        >;
      };
    };
    const s = deref(doc, create.requestBody.content['application/json']!.schema as unknown as Json) as {
      properties: Record<string, unknown>;
      required: string[];
      additionalProperties: boolean;
    };
    expect(Object.keys(s.properties)).toEqual(
      expect.arrayContaining(['id', 'url', 'token', 'authentication']),
    );
    expect(s.required).toEqual(['url']);
    expect(s.additionalProperties).toBe(false);
    const feed = doc.paths['/v1/resolutions']!.get as { parameters: Array<{ name: string; in: string }> };
    expect(feed.parameters.filter((p) => p.in === 'query').map((p) => p.name)).toEqual([
      'after',
      'limit',
      'wait',
    ]);
  });

  it('every operation lists every status its route can answer', () => {
    for (const o of OPERATIONS) {
      const responses = at(doc, o.path, o.method).responses as Record<string, Json>;
      const statuses = Object.keys(responses).map(Number);
      expect(statuses).toEqual(expect.arrayContaining([o.success.status, 401, 503]));
      if (o.method === 'post') expect(statuses).toEqual(expect.arrayContaining([400, 413, 415, 422]));
      for (const s of statuses.filter((n) => n >= 400))
        expect(Object.keys(responses[String(s)]!.content as Json)).toEqual(['application/problem+json']);
      expect((responses['401']!.headers as Record<string, Json>)['WWW-Authenticate']!.required).toBe(true);
      expect((responses['503']!.headers as Record<string, Json>)['Retry-After']!.required).toBe(true);
    }
    // The three 404s schemathesis found undocumented (issue 22).
    const has404 = (path: string, method: string) =>
      Object.keys(at(doc, path, method).responses as Json).includes('404');
    expect(has404('/v1/tasks/{taskId}/pushNotificationConfigs/{configId}/deliveries', 'get')).toBe(true);
    expect(has404('/v1/deliveries/{id}:retry', 'post')).toBe(true);
    expect(has404('/v1/registrations/{id}/remote-task', 'post')).toBe(true);
    // A route that cannot answer a status does not list it.
    expect(Object.keys(at(doc, '/v1/registrations/{id}', 'delete').responses as Json)).toEqual([
      '204',
      '401',
      '503',
    ]);
  });

  it("the id parameters' JSON Schema accepts exactly what the validator accepts", () => {
    const schema = (
      at(doc, '/v1/tasks/{taskId}/pushNotificationConfigs/{configId}', 'get').parameters as Json[]
    ).find((p) => p.name === 'taskId')!.schema as {
      minLength: number;
      maxLength: number;
      pattern: string;
      not: { enum: string[] };
    };
    const documented = (v: string) =>
      v.length >= schema.minLength &&
      v.length <= schema.maxLength &&
      new RegExp(schema.pattern, 'u').test(v) &&
      !schema.not.enum.includes(v);
    const samples = [
      'task-42',
      'a',
      '.',
      '..',
      '...',
      '',
      'a/b',
      'a b',
      'é',
      '~:._-',
      'x'.repeat(128),
      'x'.repeat(129),
    ];
    for (const v of samples) {
      expect([v, documented(v)]).toEqual([v, isValidId(v)]);
      expect([v, documented(v)]).toEqual([v, idSchema.safeParse(v).success]);
    }
  });

  it('query parameters are documented as the integers and enums the validators accept', () => {
    const params = (path: string) =>
      Object.fromEntries((at(doc, path, 'get').parameters as Json[]).map((p) => [p.name, p.schema]));
    expect(params('/v1/resolutions').wait).toEqual({ type: 'integer', minimum: 0, maximum: 30, default: 0 });
    expect(params('/v1/resolutions').limit).toEqual({
      type: 'integer',
      minimum: 1,
      maximum: 1000,
      default: 100,
    });
    expect(params('/v1/pushNotificationConfigs').pageSize).toEqual({
      type: 'integer',
      minimum: 1,
      maximum: 100,
      default: 50,
    });
    expect(params('/v1/pushNotificationConfigs').status).toEqual({
      type: 'string',
      enum: ['active', 'auth_failed', 'stopped'],
    });
    expect((params('/v1/deliveries/{id}').id as Json).format).toBe('uuid');
  });

  it('every link names an operation and exactly its path parameters', () => {
    const byId = new Map(OPERATIONS.map((o) => [o.operationId, o]));
    let links = 0;
    for (const o of OPERATIONS)
      for (const l of Object.values(o.success.links ?? {})) {
        links++;
        const target = byId.get(l.operationId);
        expect(target).toBeDefined();
        expect(Object.keys(l.parameters).sort()).toEqual(Object.keys(target!.params ?? {}).sort());
      }
    expect(links).toBeGreaterThanOrEqual(10);
  });

  it('the request examples pass the validators they document', () => {
    let examples = 0;
    for (const o of OPERATIONS) {
      const content = (
        at(doc, o.path, o.method).requestBody as { content?: Record<string, Json> } | undefined
      )?.content;
      const body = content?.['application/json']?.schema as Json | undefined;
      for (const ex of ((body && deref(doc, body))?.examples as unknown[]) ?? []) {
        examples++;
        expect(o.body!.safeParse(ex).error).toBeUndefined();
      }
      for (const p of at(doc, o.path, o.method).parameters as Json[])
        for (const ex of ((p.schema as Json).examples as unknown[]) ?? [])
          expect(o.params![p.name as string]!.safeParse(ex).success).toBe(true);
    }
    expect(examples).toBeGreaterThanOrEqual(5);
  });

  it('every body and every answer is a named schema, and no object schema is inline (issue 50)', () => {
    const schemas = (doc.components as Json).schemas as Record<string, Json>;
    for (const o of OPERATIONS) {
      const op = at(doc, o.path, o.method);
      const body = (op.requestBody as { content?: Record<string, { schema: Json }> } | undefined)?.content;
      for (const media of Object.values(body ?? {}))
        expect(media.schema.$ref).toMatch(/^#\/components\/schemas\/\w+$/);
      for (const r of Object.values(
        op.responses as Record<string, { content?: Record<string, { schema: Json }> }>,
      ))
        for (const media of Object.values(r.content ?? {}))
          expect(media.schema.$ref).toMatch(/^#\/components\/schemas\/\w+$/);
    }
    // A generated client makes a class of every object schema with properties: each is a component's root.
    const inline = [...objectsIn(doc, '#')]
      .filter(([p, s]) => s.type === 'object' && s.properties && !/^#\/components\/schemas\/\w+$/.test(p))
      .map(([p]) => p);
    // StreamResponse's members are free-form objects (their fields are not checked).
    expect(inline.filter((p) => !p.startsWith('#/components/schemas/StreamResponse/properties/'))).toEqual(
      [],
    );
    // Every $ref points at something in the document.
    const pointer = (ref: string) =>
      ref
        .slice(2)
        .split('/')
        .reduce<unknown>((n, k) => (n as Record<string, unknown> | undefined)?.[k], doc);
    for (const [p, s] of objectsIn(doc, '#'))
      if (typeof s.$ref === 'string') expect([p, pointer(s.$ref) !== undefined]).toEqual([p, true]);
    for (const [name, s] of Object.entries(schemas))
      expect([name, typeof s.description]).toEqual([name, 'string']);
    expect(Object.keys(schemas)).toEqual(
      expect.arrayContaining([
        'PushConfig',
        'CreatePushConfig',
        'Delivery',
        'Attempt',
        'TaskEvent',
        'Registration',
      ]),
    );
    expect(Object.keys(schemas)).toEqual(
      expect.arrayContaining([
        'Resolution',
        'AuditItem',
        'PushConfigPage',
        'DeliveryPage',
        'ResolutionPage',
        'AuditPage',
      ]),
    );
  });

  it('operations that answer the same thing share one schema', () => {
    const answer = (path: string, method: string) => {
      const r = Object.entries(at(doc, path, method).responses as Record<string, Json>).find(
        ([s]) => Number(s) < 300,
      )!;
      return (
        (r[1].content as Record<string, { schema: Json }>)['application/json']!.schema.$ref as string
      ).slice(REF.length);
    };
    expect(answer('/v1/tasks/{taskId}/pushNotificationConfigs', 'get')).toBe('PushConfigPage');
    expect(answer('/v1/pushNotificationConfigs', 'get')).toBe('PushConfigPage');
    expect(answer('/v1/tasks/{taskId}/pushNotificationConfigs', 'post')).toBe('PushConfig');
    expect(answer('/v1/tasks/{taskId}/pushNotificationConfigs/{configId}', 'get')).toBe('PushConfig');
    expect(answer('/v1/deliveries/{id}', 'get')).toBe('Delivery');
    expect(answer('/v1/deliveries/{id}:retry', 'post')).toBe('Delivery');
    expect(answer('/v1/registrations/{id}', 'get')).toBe('Registration');
    expect(answer('/v1/registrations/{id}/remote-task', 'post')).toBe('Registration');
  });

  it('timestamps are format date-time without a pattern; links carry runtime expressions only', () => {
    let timestamps = 0;
    for (const [p, s] of objectsIn(doc, '#'))
      if (s.format === 'date-time') {
        timestamps++;
        expect([p, s.pattern]).toEqual([p, undefined]);
      }
    expect(timestamps).toBeGreaterThanOrEqual(10);
    for (const o of OPERATIONS)
      for (const [name, l] of Object.entries(o.success.links ?? {})) {
        expect([name, 'requestBody' in l]).toEqual([name, false]);
        for (const v of Object.values(l.parameters)) expect(v).toMatch(/^\$(request|response)\./);
      }
  });

  it('every operation has one declared tag', () => {
    const tags = (doc.tags as Array<{ name: string }>).map((t) => t.name);
    for (const o of OPERATIONS) expect(tags).toContain((at(doc, o.path, o.method).tags as string[])[0]);
  });

  it('the views the routes answer with match the response schemas', () => {
    const t = new Date('2026-12-04T10:00:00Z');
    const cfg: ConfigRow = {
      row_id: '7',
      tenant_id: 'default',
      task_id: 'task-42',
      id: 'nr-llm-1',
      url: 'https://push.example.com/hook',
      token: 'client-token',
      auth_scheme: 'Bearer',
      credential_id: '1',
      status: 'stopped',
      status_reason: 'http_410',
      created_at: t,
      status_changed_at: t,
      deleted_at: null,
      last_delivered_at: t,
      failing_since: null,
      failed_jobs: 0,
    } as unknown as ConfigRow;
    expect(pushConfigResponse.parse(configView(cfg))).toBeDefined();
    expect(configPage.parse({ configs: [configView(cfg)], nextPageToken: '7' })).toBeDefined();
    const job = {
      id: '3f6c2a4e-1b2c-4d3e-8f9a-0b1c2d3e4f5a',
      seq: '1',
      tenant_id: 'default',
      event_id: '1',
      config_row_id: '7',
      task_id: 'task-42',
      config_id: 'nr-llm-1',
      status: 'waiting_retry',
      reason: 'http_503',
      attempt_count: 1,
      next_attempt_at: t,
      deadline: t,
      retry_of: '3f6c2a4e-1b2c-4d3e-8f9a-0b1c2d3e4f59',
      push_seq: '3',
      ordered: true,
      held_by: null,
      wake_early: false,
      early_taken: false,
      dispatched_at: t,
      request_id: null,
      traceparent: null,
      created_at: t,
      finished_at: t,
    } satisfies JobRow;
    const attempt: AttemptRow = {
      job_id: job.id,
      n: 1,
      started_at: t,
      duration_ms: 12,
      outcome: 'retry',
      http_status: 503,
      error: 'http_503',
      retry_after_ms: '5000',
    };
    expect(deliveryResponse.parse(deliveryView(job, [attempt]))).toBeDefined();
    const waiting = {
      ...job,
      status: 'queued' as const,
      held_by: '3f6c2a4e-1b2c-4d3e-8f9a-0b1c2d3e4f58',
      dispatched_at: null,
      finished_at: null,
    };
    const view = deliveryResponse.parse(deliveryView(waiting, [], waiting.held_by));
    expect(view).toMatchObject({ sequence: 3, waitingFor: '3f6c2a4e-1b2c-4d3e-8f9a-0b1c2d3e4f58' });
    // Waiting for its line, it has no workflow yet.
    expect(view).not.toHaveProperty('workflowId');
    const reg = {
      id: '3f6c2a4e-1b2c-4d3e-8f9a-0b1c2d3e4f5b',
      tenant_id: 'default',
      mode: 'embedded',
      status: 'resolved',
      agent_url: 'https://agent.example.com',
      agent_token_id: null,
      remote_task_id: 'rt-1',
      remote_state: 'TASK_STATE_COMPLETED',
      push_enabled: true,
      reason: 'push_not_supported',
      callback_hash: null,
      remote_config_made: false,
      workflow_started: true,
      callbacks_received: '2',
      callbacks_late: '1',
      created_at: t,
      resolved_at: t,
      pending: '0',
    } as RegistrationRow & { pending: string };
    expect(registrationResponse.parse(registrationView(reg))).toBeDefined();
    const item = feedItemView({
      cursor: '1',
      registration_id: reg.id,
      remote_task_id: 'rt-1',
      kind: 'state',
      state: 'TASK_STATE_COMPLETED',
      reason: null,
      terminal: true,
      observed_at: t,
    });
    expect(resolutionPage.parse({ items: [item], nextCursor: '1' })).toBeDefined();
    const audit = auditItemView({
      cursor: '4',
      at: t,
      actor: 'k1',
      action: 'push_config.created',
      object_type: 'push_config',
      object_id: 'task-42/nr-llm-1',
      before: null,
      after: 'active',
    });
    expect(auditPage.parse({ items: [audit], nextCursor: '4' })).toBeDefined();
    const refused = new Problem('guard_refused', 'refused', {
      rule: 'private_address',
      errors: [{ path: 'url', message: 'refused' }],
    });
    expect(problemResponse.parse(refused.body())).toBeDefined();
    expect(problemResponse.parse(new Problem('not_found', 'no such thing').body())).toBeDefined();
    // An extra field fails: the schemas are exact.
    expect(pushConfigResponse.safeParse({ ...configView(cfg), extra: 1 }).success).toBe(false);
    // Every timestamp is UTC with Z (Date.toISOString()): an offset, even +00:00, fails.
    expect(configView(cfg).createdAt).toBe('2026-12-04T10:00:00.000Z');
    expect(
      pushConfigResponse.safeParse({ ...configView(cfg), createdAt: '2026-12-04T10:00:00.000+00:00' })
        .success,
    ).toBe(false);
  });
});
