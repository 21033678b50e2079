import crypto from 'node:crypto';
import { createApiKey, revokeApiKey } from '../../src/db/apikeys';
import { connectDevServer, createConfig, json, startStack, type Stack } from '../helpers/harness';
jest.setTimeout(60_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
const RECEIVER = 'https://127.0.0.1:9/hook'; // never called: these tests write no event with configs

beforeAll(async () => {
  temporal = await connectDevServer();
  stack = await startStack(temporal, `api-it-${crypto.randomBytes(4).toString('hex')}`, { env: {} });
});
afterAll(async () => {
  await stack?.close();
  await temporal?.close();
});

async function problem(res: Response, status: number, name: string) {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  const body = (await res.json()) as Record<string, unknown>;
  expect(body).toMatchObject({
    type: `urn:a2a-push:problem:${name}`,
    status,
    title: expect.any(String),
    detail: expect.any(String),
  });
  return body;
}

const count = async (table: string) =>
  Number((await stack.tdb.db.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);

describe('authentication and the order of checks', () => {
  it('401 with WWW-Authenticate without a key, with a wrong key, and with a revoked key', async () => {
    const revoked = await createApiKey(stack.tdb.db, 'tenant-r');
    expect(
      (
        await fetch(`${stack.apiUrl}/v1/pushNotificationConfigs`, {
          headers: { authorization: `Bearer ${revoked.key}` },
        })
      ).status,
    ).toBe(200);
    expect(await revokeApiKey(stack.tdb.db, revoked.id)).toBe(true);
    for (const auth of [undefined, 'Bearer nope', 'Basic abc', 'Bearer', `Bearer ${revoked.key}`]) {
      const res = await fetch(`${stack.apiUrl}/v1/tasks/t/pushNotificationConfigs`, {
        headers: auth ? { authorization: auth } : {},
      });
      await problem(res, 401, 'unauthorized');
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
    }
  });
  it('authentication comes before the route: an unknown route without a key is 401, with a key 404', async () => {
    await problem(await fetch(`${stack.apiUrl}/v1/nothing-here`), 401, 'unauthorized');
    await problem(await stack.api('/v1/nothing-here'), 404, 'not_found');
  });
  it('PUT and PATCH are 405 with Allow, before the body is read', async () => {
    for (const method of ['PUT', 'PATCH']) {
      const one = await stack.api('/v1/tasks/t/pushNotificationConfigs/c', {
        method,
        body: 'x'.repeat(2 * 1024 * 1024),
      });
      await problem(one, 405, 'method_not_allowed');
      expect(one.headers.get('allow')).toBe('GET, DELETE');
      const list = await stack.api('/v1/tasks/t/pushNotificationConfigs', { method, json: {} });
      await problem(list, 405, 'method_not_allowed');
      expect(list.headers.get('allow')).toBe('GET, POST');
    }
  });
  it('413 over 1 MiB comes before the media type check', async () => {
    const res = await stack.api('/v1/tasks/t/pushNotificationConfigs', {
      method: 'POST',
      body: 'x'.repeat(1024 * 1024 + 1),
      headers: { 'content-type': 'text/plain' },
    });
    await problem(res, 413, 'payload_too_large');
  });
  it('415 unless the body is JSON; both JSON media types (with parameters) are taken', async () => {
    await problem(
      await stack.api('/v1/tasks/t/pushNotificationConfigs', {
        method: 'POST',
        body: '{}',
        headers: { 'content-type': 'text/plain' },
      }),
      415,
      'unsupported_media_type',
    );
    for (const ct of ['application/json', 'application/a2a+json', 'application/json; charset=utf-8']) {
      const res = await stack.api(`/v1/tasks/mt-${ct.length}/pushNotificationConfigs`, {
        method: 'POST',
        body: JSON.stringify({ url: RECEIVER }),
        headers: { 'content-type': ct },
      });
      expect(res.status).toBe(201);
    }
  });
  it('400 for a body that is not JSON, naming the problem', async () => {
    const body = await problem(
      await stack.api('/v1/tasks/t/pushNotificationConfigs', {
        method: 'POST',
        body: '{"url":',
        headers: { 'content-type': 'application/json' },
      }),
      400,
      'validation',
    );
    expect(body.errors).toEqual([{ path: '', message: expect.stringContaining('not valid JSON') }]);
  });
});

describe('bodies must be UTF-8 (JSON is UTF-8, RFC 8259 §8.1)', () => {
  /** A JSON text with raw bytes spliced in: `{"streamResponse":{"statusUpdate":{"taskId":T,"status":{"state":"<bytes>"}}}}`. */
  const eventWith = (taskId: string, bytes: Buffer) =>
    Buffer.concat([
      Buffer.from(`{"streamResponse":{"statusUpdate":{"taskId":"${taskId}","status":{"state":"`),
      bytes,
      Buffer.from('"}}}}'),
    ]);
  const NOT_UTF8 = [
    ['C3 28 (a lead byte without its continuation)', 'c328'],
    ['FF FE (bytes that never occur in UTF-8)', 'fffe'],
    ['ED A0 80 (an encoded surrogate, CESU-8)', 'eda080'],
    ['C0 80 (an overlong NUL)', 'c080'],
    ['F4 90 80 80 (past U+10FFFF)', 'f4908080'],
  ] as const;

  it.each(NOT_UTF8)(
    'an event write with %s is 400 naming the body; no event, no job, no idempotency key',
    async (_name, hex) => {
      await createConfig(stack, 'task-u8', { id: `c-${hex}`, url: RECEIVER });
      const [events, jobs] = [await count('task_events'), await count('delivery_jobs')];
      const key = crypto.randomUUID();
      const body = await problem(
        await stack.api('/v1/tasks/task-u8/events', {
          method: 'POST',
          body: eventWith('task-u8', Buffer.from(hex, 'hex')),
          headers: { 'content-type': 'application/json', 'idempotency-key': key },
        }),
        400,
        'validation',
      );
      expect(body.errors).toEqual([{ path: '', message: 'the body is not valid UTF-8' }]);
      expect(body.detail).toBe('the body is not valid UTF-8');
      expect([await count('task_events'), await count('delivery_jobs')]).toEqual([events, jobs]);
      expect(await count(`idempotency_keys WHERE key = '${key}'`)).toBe(0);
    },
  );

  it('a push config whose token is not UTF-8 is 400 and not stored; the same text in UTF-8 is stored as sent', async () => {
    const before = await count('push_configs');
    const withToken = (token: Buffer) =>
      stack.api('/v1/tasks/task-u8c/pushNotificationConfigs', {
        method: 'POST',
        body: Buffer.concat([Buffer.from(`{"url":"${RECEIVER}","token":"`), token, Buffer.from('"}')]),
        headers: { 'content-type': 'application/json' },
      });
    // "é" in Latin-1 is the single byte E9: not UTF-8.
    const latin1 = await problem(await withToken(Buffer.from('caf\xe9', 'latin1')), 400, 'validation');
    expect(latin1.errors).toEqual([{ path: '', message: 'the body is not valid UTF-8' }]);
    expect(await count('push_configs')).toBe(before);
    const ok = await withToken(Buffer.from('café 🙂', 'utf8'));
    expect(ok.status).toBe(201);
    expect(((await ok.json()) as { token: string }).token).toBe('café 🙂');
  });

  it('a charset other than UTF-8 is 415, nothing written; utf-8 in any spelling is taken', async () => {
    const before = await count('task_events');
    const ascii = eventWith('task-cs', Buffer.from('TASK_STATE_WORKING'));
    for (const ct of [
      'application/json; charset=latin1',
      'application/json; charset=ISO-8859-1',
      'application/a2a+json;charset="utf-16"',
      'application/json; charset=us-ascii',
      'application/json; charset=',
      'application/json; charset=utf-8; charset=latin1',
    ]) {
      const p = await problem(
        await stack.api('/v1/tasks/task-cs/events', {
          method: 'POST',
          body: ascii,
          headers: { 'content-type': ct },
        }),
        415,
        'unsupported_media_type',
      );
      expect(p.detail).toMatch(/^the body must be UTF-8; charset ".*" is not supported$/);
    }
    expect(await count('task_events')).toBe(before);
    for (const ct of [
      'application/json; charset=utf-8',
      'application/json;charset=UTF-8',
      'application/a2a+json; charset="utf-8"',
      'application/json; charset=utf8',
      'application/json; version=1.0; charset=Utf-8',
    ]) {
      const res = await stack.api('/v1/tasks/task-cs/events', {
        method: 'POST',
        body: ascii,
        headers: { 'content-type': ct },
      });
      expect([ct, res.status]).toEqual([ct, 202]);
    }
    expect(await count('task_events')).toBe(before + 5);
  });

  it('the order holds: 413 before a bad charset, a bad charset (415) before bytes that are not UTF-8 (400)', async () => {
    const big = Buffer.alloc(1024 * 1024 + 1, 0xff);
    await problem(
      await stack.api('/v1/tasks/task-cs/events', {
        method: 'POST',
        body: big,
        headers: { 'content-type': 'application/json; charset=latin1' },
      }),
      413,
      'payload_too_large',
    );
    const bad = eventWith('task-cs', Buffer.from('fffe', 'hex'));
    await problem(
      await stack.api('/v1/tasks/task-cs/events', {
        method: 'POST',
        body: bad,
        headers: { 'content-type': 'application/json; charset=latin1' },
      }),
      415,
      'unsupported_media_type',
    );
    await problem(
      await stack.api('/v1/tasks/task-cs/events', {
        method: 'POST',
        body: bad,
        headers: { 'content-type': 'text/plain' },
      }),
      415,
      'unsupported_media_type',
    );
    await problem(
      await stack.api('/v1/tasks/task-cs/events', {
        method: 'POST',
        body: bad,
        headers: { 'content-type': 'application/json' },
      }),
      400,
      'validation',
    );
  });
});

describe('push configs', () => {
  it('201 with the stored config: generated id, masked credential, token as given, Bearer normalised', async () => {
    const c = await createConfig(stack, 'task-1', {
      url: RECEIVER,
      token: 'tok 123',
      authentication: { scheme: 'BEARER', credentials: 'super-secret' },
      tenant: 'ignored',
    });
    expect(c).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      taskId: 'task-1',
      url: RECEIVER,
      token: 'tok 123',
      authentication: { scheme: 'Bearer', credentials: '********' },
      status: 'active',
      createdAt: expect.any(String),
      statusChangedAt: expect.any(String),
      // A new config: no 2xx yet, not failing.
      health: { failedJobs: 0 },
    });
    expect(c).not.toHaveProperty('statusReason');
  });

  it('409 when the id is already live for the task; the same id on another task is fine', async () => {
    await createConfig(stack, 'task-dup', { id: 'same', url: RECEIVER });
    await problem(
      await stack.api('/v1/tasks/task-dup/pushNotificationConfigs', {
        method: 'POST',
        json: { id: 'same', url: RECEIVER },
      }),
      409,
      'conflict',
    );
    await createConfig(stack, 'task-dup-2', { id: 'same', url: RECEIVER });
  });

  it.each([
    [
      { url: RECEIVER, authentication: { scheme: 'Basic', credentials: 'x' } },
      'authentication.scheme',
      'unsupported authentication scheme',
    ],
    [
      { url: RECEIVER, authentication: { scheme: 'Bearer', credentials: '' } },
      'authentication.credentials',
      '',
    ],
    [{ url: RECEIVER, authentication: { scheme: 'Bearer' } }, 'authentication.credentials', ''],
    [
      { url: RECEIVER, authentication: { scheme: 'Bearer', credentials: 'x', extra: 1 } },
      'authentication.extra',
      'not a known field',
    ],
    [{ url: RECEIVER, surprise: true }, 'surprise', 'not a known field'],
    [{ url: RECEIVER, id: '..' }, 'id', ''],
    [{ url: RECEIVER, id: 'a/b' }, 'id', ''],
    [{ url: RECEIVER, id: 'x'.repeat(129) }, 'id', ''],
    [{ url: RECEIVER, taskId: 'other' }, 'taskId', "path's taskId"],
    [{}, 'url', ''],
    [{ url: 42 }, 'url', ''],
  ])('400 validation for %j names %s', async (body, path, message) => {
    const before = await count('push_configs');
    const p = await problem(
      await stack.api('/v1/tasks/task-v/pushNotificationConfigs', { method: 'POST', json: body }),
      400,
      'validation',
    );
    expect(p.errors).toEqual(expect.arrayContaining([{ path, message: expect.stringContaining(message) }]));
    expect(await count('push_configs')).toBe(before);
  });

  it.each([
    ['http://example.com/hook', 'scheme'],
    ['https://user:pw@example.com/hook', 'userinfo'],
    ['https://localhost/hook', 'forbidden_host'],
    ['https://10.0.0.1/hook', 'private_address'],
    ['not a url', 'url_invalid'],
    [`https://example.com/${'a'.repeat(2048)}`, 'url_too_long'],
  ])('400 guard_refused for %.40s with rule %s', async (url, rule) => {
    const p = await problem(
      await stack.api('/v1/tasks/task-g/pushNotificationConfigs', { method: 'POST', json: { url } }),
      400,
      'guard_refused',
    );
    expect(p.rule).toBe(rule);
    expect(p.errors).toEqual([{ path: 'url', message: expect.any(String) }]);
  });

  it('400 for an invalid taskId in the path', async () => {
    const res = await stack.api(`/v1/tasks/${'x'.repeat(129)}/pushNotificationConfigs`);
    const body = await problem(res, 400, 'validation');
    expect(body.errors).toEqual([{ path: 'taskId', message: expect.any(String) }]);
  });

  it('404 for an absent config and for another tenant’s; DELETE is 204 either way and leaves theirs', async () => {
    await createConfig(stack, 'task-t', { id: 'mine', url: RECEIVER });
    const other = await createApiKey(stack.tdb.db, 'tenant-b');
    const asOther = (path: string, init: RequestInit = {}) =>
      fetch(`${stack.apiUrl}${path}`, { ...init, headers: { authorization: `Bearer ${other.key}` } });
    await problem(await asOther('/v1/tasks/task-t/pushNotificationConfigs/mine'), 404, 'not_found');
    await problem(await stack.api('/v1/tasks/task-t/pushNotificationConfigs/absent'), 404, 'not_found');
    expect(
      (await asOther('/v1/tasks/task-t/pushNotificationConfigs/mine', { method: 'DELETE' })).status,
    ).toBe(204);
    expect((await stack.api('/v1/tasks/task-t/pushNotificationConfigs/mine')).status).toBe(200);
    const theirList = await json(asOther('/v1/tasks/task-t/pushNotificationConfigs'));
    expect(theirList.configs).toEqual([]);
    expect(
      (await stack.api('/v1/tasks/task-t/pushNotificationConfigs/mine', { method: 'DELETE' })).status,
    ).toBe(204);
    expect(
      (await stack.api('/v1/tasks/task-t/pushNotificationConfigs/mine', { method: 'DELETE' })).status,
    ).toBe(204);
    await problem(await stack.api('/v1/tasks/task-t/pushNotificationConfigs/mine'), 404, 'not_found');
  });

  it('lists oldest first in pages; nextPageToken is absent on the last page; bad paging is 400', async () => {
    for (let i = 0; i < 5; i++) await createConfig(stack, 'task-page', { id: `p${i}`, url: RECEIVER });
    const seen: string[] = [];
    let token: string | undefined = '0';
    let pages = 0;
    while (token !== undefined) {
      const page = (await json(
        stack.api(`/v1/tasks/task-page/pushNotificationConfigs?pageSize=2&pageToken=${token}`),
      )) as { configs: Array<{ id: string }>; nextPageToken?: string };
      seen.push(...page.configs.map((c) => c.id));
      token = page.nextPageToken;
      pages++;
    }
    expect(seen).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(pages).toBe(3);
    for (const q of ['pageSize=0', 'pageSize=101', 'pageSize=abc', 'pageToken=-1', 'pageToken=x'])
      await problem(await stack.api(`/v1/tasks/task-page/pushNotificationConfigs?${q}`), 400, 'validation');
    const all = await json(stack.api('/v1/pushNotificationConfigs?status=active&pageSize=100'));
    expect(all.configs.length).toBeGreaterThanOrEqual(5);
    await problem(await stack.api('/v1/pushNotificationConfigs?status=paused'), 400, 'validation');
  });
});

describe('task events', () => {
  it.each([
    [{}, 'streamResponse'],
    [{ streamResponse: {} }, 'streamResponse'],
    [{ streamResponse: { task: {}, message: {} } }, 'streamResponse'],
    [{ streamResponse: { result: {} } }, 'streamResponse.result'],
    [{ streamResponse: { task: 'x' } }, 'streamResponse.task'],
    [{ streamResponse: { task: { id: 'other-task' } } }, 'streamResponse.task.id'],
    [{ streamResponse: { statusUpdate: { taskId: 'other-task' } } }, 'streamResponse.statusUpdate.taskId'],
    [{ streamResponse: { task: {} }, extra: 1 }, 'extra'],
  ])('400 for %j naming %s, and nothing written', async (body, path) => {
    const before = await count('task_events');
    const p = await problem(
      await stack.api('/v1/tasks/task-ev/events', { method: 'POST', json: body }),
      400,
      'validation',
    );
    expect((p.errors as Array<{ path: string }>).map((e) => e.path)).toContain(path);
    expect(await count('task_events')).toBe(before);
  });

  it('an Idempotency-Key repeat returns the stored answer; another body with it is 422', async () => {
    await createConfig(stack, 'task-idem', { id: 'c', url: RECEIVER });
    const key = crypto.randomUUID();
    const send = (body: unknown) =>
      stack.api('/v1/tasks/task-idem/events', {
        method: 'POST',
        json: body,
        headers: { 'idempotency-key': key },
      });
    const first = await send({ streamResponse: { task: { id: 'task-idem', a: 1, b: 2 } } });
    expect(first.status).toBe(202);
    const a = await first.json();
    const eventsAfterFirst = await count('task_events');
    // Same body with other key order and spacing is the same request.
    const again = await stack.api('/v1/tasks/task-idem/events', {
      method: 'POST',
      body: '{ "streamResponse": { "task": { "b": 2, "a": 1, "id": "task-idem" } } }',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    });
    expect(again.status).toBe(202);
    expect(await again.json()).toEqual(a);
    expect(await count('task_events')).toBe(eventsAfterFirst);
    await problem(
      await send({ streamResponse: { task: { id: 'task-idem', a: 2 } } }),
      422,
      'idempotency_mismatch',
    );
    // The key is per tenant across routes.
    await problem(
      await stack.api('/v1/tasks/task-idem/pushNotificationConfigs', {
        method: 'POST',
        json: { url: RECEIVER },
        headers: { 'idempotency-key': key },
      }),
      422,
      'idempotency_mismatch',
    );
    expect(await count('task_events')).toBe(eventsAfterFirst);
  });

  it('concurrent repeats with one Idempotency-Key write once and all get the first answer', async () => {
    const key = crypto.randomUUID();
    const before = await count('task_events');
    const answers = await Promise.all(
      Array.from({ length: 8 }, () =>
        stack.api('/v1/tasks/task-conc/events', {
          method: 'POST',
          json: { streamResponse: { task: { id: 'task-conc' } } },
          headers: { 'idempotency-key': key },
        }),
      ),
    );
    const bodies = await Promise.all(answers.map((r) => json(r)));
    expect(answers.map((r) => r.status)).toEqual(Array(8).fill(202));
    expect(new Set(bodies.map((b) => b.eventId)).size).toBe(1);
    expect(await count('task_events')).toBe(before + 1);
  });

  it('a failed request is not stored: the same key may be retried after a 400', async () => {
    const key = crypto.randomUUID();
    const bad = await stack.api('/v1/tasks/task-k/events', {
      method: 'POST',
      json: { streamResponse: {} },
      headers: { 'idempotency-key': key },
    });
    expect(bad.status).toBe(400);
    const good = await stack.api('/v1/tasks/task-k/events', {
      method: 'POST',
      json: { streamResponse: { task: { id: 'task-k' } } },
      headers: { 'idempotency-key': key },
    });
    expect(good.status).toBe(202);
  });

  it('one transaction: an event whose job insert fails leaves no event row and no job', async () => {
    await createConfig(stack, 'task-boom', { id: 'c', url: RECEIVER });
    await stack.tdb.db.query(`
      CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.task_id = 'task-boom' THEN RAISE EXCEPTION 'job insert fails'; END IF; RETURN NEW; END $$;
      CREATE TRIGGER boom BEFORE INSERT ON delivery_jobs FOR EACH ROW EXECUTE FUNCTION boom();`);
    try {
      const events = await count('task_events');
      const jobs = await count('delivery_jobs');
      const res = await stack.api('/v1/tasks/task-boom/events', {
        method: 'POST',
        json: { streamResponse: { task: { id: 'task-boom' } } },
        headers: { 'idempotency-key': 'boom-key' },
      });
      expect(res.status).toBe(500);
      expect(await count('task_events')).toBe(events);
      expect(await count('delivery_jobs')).toBe(jobs);
      expect(await count(`idempotency_keys WHERE key = 'boom-key'`)).toBe(0);
    } finally {
      await stack.tdb.db.query('DROP TRIGGER boom ON delivery_jobs; DROP FUNCTION boom();');
    }
  });
});

describe('deliveries', () => {
  it('404 for an unknown or malformed delivery id; 405 for the wrong method', async () => {
    await problem(await stack.api(`/v1/deliveries/${crypto.randomUUID()}`), 404, 'not_found');
    await problem(await stack.api('/v1/deliveries/not-a-uuid'), 404, 'not_found');
    const res = await stack.api(`/v1/deliveries/${crypto.randomUUID()}`, { method: 'DELETE' });
    await problem(res, 405, 'method_not_allowed');
    expect(res.headers.get('allow')).toBe('GET');
    const retry = await stack.api(`/v1/deliveries/${crypto.randomUUID()}:retry`);
    await problem(retry, 405, 'method_not_allowed');
    expect(retry.headers.get('allow')).toBe('POST');
  });
});

describe('ops endpoints need no key', () => {
  it('/healthz, /readyz and /metrics answer without a key', async () => {
    expect((await fetch(`${stack.apiUrl}/healthz`)).status).toBe(200);
    expect((await fetch(`${stack.apiUrl}/readyz`)).status).toBe(200);
    const m = await (await fetch(`${stack.apiUrl}/metrics`)).text();
    expect(m).toContain('a2a_push_event_writes_total');
    expect(m).toContain('a2a_push_guard_refusals_total');
    // The gauges read from Postgres at the scrape (contract §7): a count, never the -1 of a failed read.
    for (const gauge of ['a2a_push_outbox_queued', 'a2a_push_outbox_held', 'a2a_push_inbox_unprocessed']) {
      const line = new RegExp(`^${gauge}\\{process="api"\\} (\\d+)$`, 'm').exec(m);
      expect([gauge, line?.[1] !== undefined]).toEqual([gauge, true]);
    }
    const doc = await json(fetch(`${stack.apiUrl}/v1/openapi.json`));
    expect(doc.openapi).toBe('3.1.0');
  });
});
