import { Registry } from 'prom-client';
import { createApiApp } from '../../src/api/app';
import { openApiDocument, OPERATIONS } from '../../src/api/openapi';

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
    const s = create.requestBody.content['application/json']!.schema;
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
});
