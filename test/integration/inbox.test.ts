import crypto from 'node:crypto';
import { connectDevServer, eventually, json, startStack, type Json, type Stack } from '../helpers/harness';
import { makeTestTls } from '../helpers/tls';
import { runRetention } from '../../src/retention';
import { inTx } from '../../src/db/pool';
import { Agent, fetch as undiciFetch } from 'undici';

jest.setTimeout(60_000);

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
let stack: Stack;
const tlsAgent = new Agent({ connect: { ca: makeTestTls().caPem } });
// The agent URL is never called in these tests: no remote task id is posted.
const AGENT = 'https://127.0.0.1:9';

beforeAll(async () => {
  temporal = await connectDevServer();
  stack = await startStack(temporal, `inbox-it-${crypto.randomBytes(4).toString('hex')}`, {
    env: { INBOX_BOUND_PER_REGISTRATION: '3', INBOX_BOUND_TOTAL: '5' },
  });
});
afterAll(async () => {
  await stack?.close();
  await temporal?.close();
  await tlsAgent.close();
});

async function embedded(): Promise<{ id: string; url: string; credential: string; reg: Json }> {
  const res = await stack.api('/v1/registrations', {
    method: 'POST',
    json: { mode: 'embedded', agent: { url: AGENT } },
  });
  expect(res.status).toBe(201);
  const reg: Json = await res.json();
  return {
    id: reg.id,
    url: reg.pushNotificationConfig.url,
    credential: reg.pushNotificationConfig.authentication.credentials,
    reg,
  };
}

const callback = (url: string, init: { headers?: Record<string, string>; body?: string } = {}) =>
  undiciFetch(url, {
    method: 'POST',
    dispatcher: tlsAgent,
    headers: { 'content-type': 'application/json', ...init.headers },
    body:
      init.body ??
      JSON.stringify({ statusUpdate: { taskId: 'remote-1', status: { state: 'TASK_STATE_WORKING' } } }),
  });

const rows = async (id?: string) =>
  Number(
    (
      await stack.tdb.db.query(
        `SELECT count(*) AS n FROM inbox_callbacks ${id ? 'WHERE registration_id = $1' : ''}`,
        id ? [id] : [],
      )
    ).rows[0].n,
  );

describe('inbox authentication', () => {
  it('the embedded registration hands out the callback URL and a credential once; GET never shows it', async () => {
    const e = await embedded();
    expect(e.reg).toMatchObject({
      mode: 'embedded',
      status: 'pending',
      pushEnabled: true,
      callbacks: { received: 0, pending: 0, late: 0 },
    });
    expect(e.url).toBe(`${stack.inboxUrl}/a2a/push/${e.id}`);
    expect(e.reg.pushNotificationConfig).toMatchObject({ id: e.id, authentication: { scheme: 'Bearer' } });
    expect(Buffer.from(e.credential, 'base64url')).toHaveLength(32);
    const got = await json(stack.api(`/v1/registrations/${e.id}`));
    expect(JSON.stringify(got)).not.toContain(e.credential);
    const stored = await stack.tdb.db.query('SELECT callback_hash FROM registrations WHERE id = $1', [e.id]);
    expect(stored.rows[0].callback_hash).toEqual(crypto.createHash('sha256').update(e.credential).digest());
  });

  it('no header, wrong scheme, wrong credential, another registration’s credential, only the token header: 401, nothing stored', async () => {
    const a = await embedded();
    const b = await embedded();
    const before = await rows();
    const cases: Array<Record<string, string>> = [
      {},
      { authorization: `Basic ${a.credential}` },
      { authorization: 'Bearer wrong' },
      { authorization: `Bearer ${b.credential}` },
      { 'x-a2a-notification-token': a.credential },
      { authorization: `Bearer ${a.credential}x` },
    ];
    for (const headers of cases) {
      const res = await callback(a.url, { headers });
      expect(res.status).toBe(401);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
    }
    expect(await rows()).toBe(before);
    const reg = await json(stack.api(`/v1/registrations/${a.id}`));
    expect(reg.callbacks).toEqual({ received: 0, pending: 0, late: 0 });
  });

  it('an unknown registration answers exactly like a wrong credential', async () => {
    const unknown = await callback(`${stack.inboxUrl}/a2a/push/${crypto.randomUUID()}`, {
      headers: { authorization: 'Bearer x' },
    });
    const malformed = await callback(`${stack.inboxUrl}/a2a/push/not-a-uuid`, {
      headers: { authorization: 'Bearer x' },
    });
    const a = await embedded();
    const wrong = await callback(a.url, { headers: { authorization: 'Bearer x' } });
    const bodies = await Promise.all([unknown, malformed, wrong].map((r) => r.json()));
    expect([unknown.status, malformed.status, wrong.status]).toEqual([401, 401, 401]);
    expect(bodies[0]).toEqual(bodies[2]);
    expect(bodies[1]).toEqual(bodies[2]);
  });

  it('the right Bearer with a wrong X-A2A-Notification-Token is accepted and stored before the 200', async () => {
    const a = await embedded();
    const res = await callback(a.url, {
      headers: { authorization: `Bearer ${a.credential}`, 'x-a2a-notification-token': 'wrong' },
    });
    expect(res.status).toBe(200);
    expect(await rows(a.id)).toBe(1);
    const reg = await json(stack.api(`/v1/registrations/${a.id}`));
    expect(reg.callbacks).toEqual({ received: 1, pending: 1, late: 0 });
    const row = await stack.tdb.db.query(
      'SELECT body_task_id, kind FROM inbox_callbacks WHERE registration_id = $1',
      [a.id],
    );
    expect(row.rows).toEqual([{ body_task_id: 'remote-1', kind: 'statusUpdate' }]);
  });
});

describe('a credential checked before and changed since', () => {
  it('a credential replaced after it was accepted (Idempotency-Key repeat) is refused: 401, nothing stored; the new one is accepted', async () => {
    const key = crypto.randomUUID();
    const send = async () => {
      const res = await stack.api('/v1/registrations', {
        method: 'POST',
        json: { mode: 'embedded', agent: { url: AGENT } },
        headers: { 'idempotency-key': key },
      });
      expect(res.status).toBe(201);
      return (await res.json()) as Json;
    };
    const a = await send();
    const url: string = a.pushNotificationConfig.url;
    const old: string = a.pushNotificationConfig.authentication.credentials;
    // Accepted once: the inbox has now seen (and remembers) the old credential.
    expect((await callback(url, { headers: { authorization: `Bearer ${old}` } })).status).toBe(200);
    const fresh: string = (await send()).pushNotificationConfig.authentication.credentials;
    expect(fresh).not.toBe(old);
    const before = await rows(a.id);
    const refused = await callback(url, { headers: { authorization: `Bearer ${old}` } });
    expect(refused.status).toBe(401);
    expect(refused.headers.get('www-authenticate')).toBe('Bearer realm="a2a-push-inbox"');
    expect(await rows(a.id)).toBe(before);
    expect((await callback(url, { headers: { authorization: `Bearer ${fresh}` } })).status).toBe(200);
    expect(await rows(a.id)).toBe(before + 1);
    expect(await json(stack.api(`/v1/registrations/${a.id}`))).toMatchObject({
      callbacks: { received: 2, pending: 2, late: 0 },
    });
  });

  it('a registration deleted after a callback was accepted takes the next ones as late: 200, counted, no row', async () => {
    const a = await embedded();
    const auth = { authorization: `Bearer ${a.credential}` };
    expect((await callback(a.url, { headers: auth })).status).toBe(200);
    expect((await stack.api(`/v1/registrations/${a.id}`, { method: 'DELETE' })).status).toBe(204);
    const before = await rows(a.id);
    for (let i = 0; i < 2; i++) {
      const res = await callback(a.url, { headers: auth });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ status: 'late' });
    }
    expect(await rows(a.id)).toBe(before);
    expect(await json(stack.api(`/v1/registrations/${a.id}`))).toMatchObject({
      status: 'deleted',
      callbacks: { received: 3, late: 2 },
    });
  });
});

describe('inbox checks after authentication', () => {
  it('413 over 1 MiB, 415 for non-JSON, 400 for non-StreamResponse: problem+json, nothing stored', async () => {
    const a = await embedded();
    const auth = { authorization: `Bearer ${a.credential}` };
    const big = await callback(a.url, {
      headers: auth,
      body: JSON.stringify({ task: { x: 'a'.repeat(1024 * 1024) } }),
    });
    expect(big.status).toBe(413);
    const text = await callback(a.url, { headers: { ...auth, 'content-type': 'text/plain' }, body: '{}' });
    expect(text.status).toBe(415);
    const notJson = await callback(a.url, { headers: auth, body: '{"task":' });
    expect(notJson.status).toBe(400);
    // An empty body as JSON is not a StreamResponse: 400 naming the whole body, not the media type's 415.
    const empty = await callback(a.url, { headers: auth, body: '' });
    expect(empty.status).toBe(400);
    expect(await empty.json()).toMatchObject({
      type: 'urn:a2a-push:problem:validation',
      errors: [{ path: '', message: 'the body is empty' }],
    });
    // No body and no media type at all: the media type's 415 comes first.
    const bare = await undiciFetch(a.url, { method: 'POST', dispatcher: tlsAgent, headers: auth });
    expect(bare.status).toBe(415);
    for (const body of ['{}', '{"task":{},"message":{}}', '{"result":{}}', '[]', '{"task":"x"}']) {
      const r = await callback(a.url, { headers: auth, body });
      expect(r.status).toBe(400);
      expect((await json(r as unknown as Response)).type).toBe('urn:a2a-push:problem:validation');
    }
    // A task id Postgres text cannot hold is the sender's error, named, not a 500.
    const nul = await callback(a.url, {
      headers: auth,
      body: '{"statusUpdate":{"taskId":"r\\u0000x","status":{"state":"TASK_STATE_WORKING"}}}',
    });
    expect(nul.status).toBe(400);
    expect(((await nul.json()) as Json).errors).toEqual([
      { path: 'statusUpdate.taskId', message: 'must not contain U+0000' },
    ]);
    expect(await rows(a.id)).toBe(0);
    const ok = await callback(a.url, {
      headers: { ...auth, 'content-type': 'application/a2a+json' },
      body: '{"task":{"id":"r"}}',
    });
    expect(ok.status).toBe(200);
  });

  it('a registration row held by another transaction past the lock timeout: its callback gets 503, nothing stored; other registrations are not held up', async () => {
    await stack.tdb.db.query('UPDATE inbox_callbacks SET processed_at = now()');
    const [held, other] = [await embedded(), await embedded()];
    const lock = await stack.tdb.db.connect();
    try {
      await lock.query('BEGIN');
      await lock.query('SELECT 1 FROM registrations WHERE id = $1 FOR UPDATE', [held.id]);
      let heldAnswered = false;
      const heldAnswer = callback(held.url, { headers: { authorization: `Bearer ${held.credential}` } }).then(
        (r) => {
          heldAnswered = true;
          return r;
        },
      );
      // The held callback's store is waiting for the row lock (seen in pg_locks, not assumed after a sleep).
      await eventually(
        async () =>
          (
            await stack.tdb.db.query(
              `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE NOT l.granted AND a.datname = current_database() AND a.query LIKE '%inbox_store%'`,
            )
          ).rows[0].n,
        (n) => n >= 1,
      );
      const otherAnswer = await callback(other.url, {
        headers: { authorization: `Bearer ${other.credential}` },
      });
      expect(otherAnswer.status).toBe(200);
      // …answered while the held one still waits (its lock timeout is 5 s, the scale of this check).
      expect(heldAnswered).toBe(false);
      const r = await heldAnswer;
      expect(r.status).toBe(503);
      expect(r.headers.get('retry-after')).toBe('5');
    } finally {
      await lock.query('ROLLBACK');
      lock.release();
    }
    expect(await rows(held.id)).toBe(0);
    expect(await rows(other.id)).toBe(1);
    // How long the store waits is the function's own setting (its wall-clock length is not tested here).
    const config = await stack.tdb.db.query(`SELECT proconfig FROM pg_proc WHERE proname = 'inbox_store'`);
    expect(config.rows.map((c) => c.proconfig)).toEqual([['lock_timeout=5s']]);
    // Once the row is free again, the same callback is stored.
    const again = await callback(held.url, { headers: { authorization: `Bearer ${held.credential}` } });
    expect(again.status).toBe(200);
    expect(await rows(held.id)).toBe(1);
  });

  it('over the per-registration bound: 429 with Retry-After, nothing stored; the total bound holds across registrations', async () => {
    // Bounds for this stack: 3 per registration, 5 in total (other tests' rows count too, so measure).
    await stack.tdb.db.query('UPDATE inbox_callbacks SET processed_at = now()');
    const a = await embedded();
    const auth = { authorization: `Bearer ${a.credential}` };
    const answers: number[] = [];
    for (let i = 0; i < 5; i++) answers.push((await callback(a.url, { headers: auth })).status);
    expect(answers).toEqual([200, 200, 200, 429, 429]);
    const limited = await callback(a.url, { headers: auth });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('5');
    expect(((await limited.json()) as Json).type).toBe('urn:a2a-push:problem:rate_limited');
    expect(await rows(a.id)).toBe(3);

    const b = await embedded();
    const authB = { authorization: `Bearer ${b.credential}` };
    const bAnswers: number[] = [];
    for (let i = 0; i < 3; i++) bAnswers.push((await callback(b.url, { headers: authB })).status);
    expect(bAnswers).toEqual([200, 200, 429]);
    const unprocessed = await stack.tdb.db.query(
      'SELECT count(*)::int AS n FROM inbox_callbacks WHERE processed_at IS NULL',
    );
    expect(unprocessed.rows[0].n).toBe(5);
    const reg = await json(stack.api(`/v1/registrations/${a.id}`));
    expect(reg.callbacks).toEqual({ received: 3, pending: 3, late: 0 });
  });

  it('callbacks sent at once are stored together and the bounds stay exact: 3 of 12 for one registration', async () => {
    await stack.tdb.db.query('UPDATE inbox_callbacks SET processed_at = now()');
    const a = await embedded();
    const auth = { authorization: `Bearer ${a.credential}` };
    const answers = await Promise.all(
      Array.from({ length: 12 }, () => callback(a.url, { headers: auth }).then((r) => r.status)),
    );
    expect(answers.filter((s) => s === 200)).toHaveLength(3);
    expect(answers.filter((s) => s === 429)).toHaveLength(9);
    expect(await rows(a.id)).toBe(3);
    const reg = await json(stack.api(`/v1/registrations/${a.id}`));
    expect(reg.callbacks).toEqual({ received: 3, pending: 3, late: 0 });
  });

  it('one store statement (inbox_store): each registration up to its bound in input order, the total over the batch, a replaced credential stores nothing', async () => {
    const db = stack.tdb.db;
    await db.query('UPDATE inbox_callbacks SET processed_at = now()');
    const [a, b, c] = [await embedded(), await embedded(), await embedded()];
    const hash = async (id: string) =>
      (await db.query('SELECT callback_hash FROM registrations WHERE id = $1', [id])).rows[0]
        .callback_hash as Buffer;
    const [ha, hb, hc] = [await hash(a.id), await hash(b.id), await hash(c.id)];
    const input: Array<[string, Buffer]> = [
      [a.id, ha],
      [b.id, Buffer.alloc(32)], // a credential that is not (or no longer) b's
      [a.id, ha],
      [a.id, ha],
      [a.id, ha], // a's fourth: over its bound of 3
      [c.id, hc],
      [b.id, hb],
      [c.id, hc], // the sixth admissible: over the total of 5
    ];
    const stored = await db.query(
      'SELECT ord, id, inbox_pending FROM inbox_store($1, $2, $3, $4, $5, 3, 5)',
      [
        input.map(([id]) => id),
        input.map(([, h]) => h),
        input.map((_, i) => `remote-${i + 1}`),
        input.map(() => 'statusUpdate'),
        input.map((_, i) => JSON.stringify({ n: i + 1, quote: 'a "quoted" \\ body' })),
      ],
    );
    expect(stored.rows.map((r) => [r.ord, r.id, r.inbox_pending])).toEqual([
      [1, a.id, 1],
      [3, a.id, 2],
      [4, a.id, 3],
      [6, c.id, 1],
      [7, b.id, 1],
    ]);
    const kept = await db.query(
      'SELECT registration_id, body_task_id, body FROM inbox_callbacks WHERE processed_at IS NULL ORDER BY id',
    );
    expect(kept.rows.map((r) => [r.registration_id, r.body_task_id])).toEqual([
      [a.id, 'remote-1'],
      [a.id, 'remote-3'],
      [a.id, 'remote-4'],
      [c.id, 'remote-6'],
      [b.id, 'remote-7'],
    ]);
    expect(JSON.parse(kept.rows[4].body)).toEqual({ n: 7, quote: 'a "quoted" \\ body' });
    for (const [r, n] of [
      [a, 3],
      [b, 1],
      [c, 1],
    ] as const)
      expect((await json(stack.api(`/v1/registrations/${r.id}`))).callbacks).toEqual({
        received: n,
        pending: n,
        late: 0,
      });
  });

  it('the total count follows stores, processing and deletes; an id without a row counts until the daily recount removes it', async () => {
    const db = stack.tdb.db;
    await db.query('UPDATE inbox_callbacks SET processed_at = now()');
    const counted = async () => Number((await db.query('SELECT inbox_unprocessed_total() AS n')).rows[0].n);
    const actual = async () =>
      Number(
        (await db.query('SELECT count(*) AS n FROM inbox_callbacks WHERE processed_at IS NULL')).rows[0].n,
      );
    expect(await counted()).toBe(0);
    const a = await embedded();
    const b = await embedded();
    for (const r of [a, a, b])
      expect((await callback(r.url, { headers: { authorization: `Bearer ${r.credential}` } })).status).toBe(
        200,
      );
    expect([await counted(), await actual()]).toEqual([3, 3]);
    // A GetTask processes a's; b's registration is deleted (its callbacks processed with it).
    await db.query('UPDATE inbox_callbacks SET processed_at = now() WHERE registration_id = $1', [a.id]);
    expect([await counted(), await actual()]).toEqual([1, 1]);
    expect((await stack.api(`/v1/registrations/${b.id}`, { method: 'DELETE' })).status).toBe(204);
    expect([await counted(), await actual()]).toEqual([0, 0]);
    // An insert that rolled back after taking its id leaves a gap: counted as unprocessed (a 429 too
    // early, never a bound passed) until the recount the daily cleanup runs.
    await expect(
      inTx(db, async (tx) => {
        await tx.query(
          `INSERT INTO inbox_callbacks (registration_id, kind, body) VALUES ($1, 'task', '{}')`,
          [a.id],
        );
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect([await counted(), await actual()]).toEqual([1, 0]);
    await runRetention(db, 30 * 86_400_000);
    expect([await counted(), await actual()]).toEqual([0, 0]);
  });

  it('a deleted registration answers 200 to its own credential and only counts it: no row', async () => {
    const a = await embedded();
    expect((await stack.api(`/v1/registrations/${a.id}`, { method: 'DELETE' })).status).toBe(204);
    const before = await rows(a.id);
    const res = await callback(a.url, { headers: { authorization: `Bearer ${a.credential}` } });
    expect(res.status).toBe(200);
    expect(await rows(a.id)).toBe(before);
    const reg = await json(stack.api(`/v1/registrations/${a.id}`));
    expect(reg).toMatchObject({ status: 'deleted', callbacks: { received: 1, pending: 0, late: 1 } });
    // Its wrong credential still looks like any other.
    expect((await callback(a.url, { headers: { authorization: 'Bearer nope' } })).status).toBe(401);
  });
});

describe('callback bodies must be UTF-8', () => {
  const send = (url: string, body: Buffer, headers: Record<string, string>) =>
    undiciFetch(url, {
      method: 'POST',
      dispatcher: tlsAgent,
      headers: { 'content-type': 'application/json', ...headers },
      body,
    });
  /** `{"statusUpdate":{"taskId":"<bytes>","status":{"state":"TASK_STATE_WORKING"}}}` with raw bytes spliced in. */
  const withTaskId = (bytes: Buffer) =>
    Buffer.concat([
      Buffer.from('{"statusUpdate":{"taskId":"'),
      bytes,
      Buffer.from('","status":{"state":"TASK_STATE_WORKING"}}}'),
    ]);

  it('a task id of bytes that are not UTF-8 (C3 28, FF FE, ED A0 80, C0 80) is 400 naming the body; nothing stored or counted', async () => {
    await stack.tdb.db.query('UPDATE inbox_callbacks SET processed_at = now()');
    const a = await embedded();
    const auth = { authorization: `Bearer ${a.credential}` };
    for (const hex of ['c328', 'fffe', 'eda080', 'c080']) {
      const res = await send(a.url, withTaskId(Buffer.from(hex, 'hex')), auth);
      expect([hex, res.status]).toEqual([hex, 400]);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(await res.json()).toMatchObject({
        type: 'urn:a2a-push:problem:validation',
        detail: 'the body is not valid UTF-8',
        errors: [{ path: '', message: 'the body is not valid UTF-8' }],
      });
    }
    // The credential is still checked first, before any of the body is read.
    const wrong = await send(a.url, withTaskId(Buffer.from('c328', 'hex')), { authorization: 'Bearer nope' });
    expect(wrong.status).toBe(401);
    expect(await rows(a.id)).toBe(0);
    const reg = await json(stack.api(`/v1/registrations/${a.id}`));
    expect(reg.callbacks).toEqual({ received: 0, pending: 0, late: 0 });
  });

  it('a charset other than UTF-8 is 415 (before the bytes are looked at), nothing stored; utf-8 in any spelling is taken', async () => {
    await stack.tdb.db.query('UPDATE inbox_callbacks SET processed_at = now()');
    const a = await embedded();
    const auth = { authorization: `Bearer ${a.credential}` };
    for (const [ct, bytes] of [
      ['application/json; charset=latin1', 'r'],
      ['application/a2a+json; charset="ISO-8859-1"', 'r'],
      ['application/json; charset=latin1', '\xff'],
    ] as const) {
      const res = await send(a.url, withTaskId(Buffer.from(bytes, 'latin1')), {
        ...auth,
        'content-type': ct,
      });
      expect([ct, res.status]).toEqual([ct, 415]);
      expect(await res.json()).toMatchObject({
        type: 'urn:a2a-push:problem:unsupported_media_type',
        detail: expect.stringMatching(
          /^the body must be UTF-8; charset "(latin1|ISO-8859-1)" is not supported$/,
        ),
      });
    }
    expect(await rows(a.id)).toBe(0);
    for (const ct of ['application/json; charset=UTF-8', 'application/a2a+json;charset="utf-8"']) {
      const res = await send(a.url, withTaskId(Buffer.from('r')), { ...auth, 'content-type': ct });
      expect([ct, res.status]).toEqual([ct, 200]);
    }
    expect(await rows(a.id)).toBe(2);
  });

  it('escaped lone surrogates are valid JSON: 200, the body is stored byte for byte, the task id records U+FFFD for each', async () => {
    await stack.tdb.db.query('UPDATE inbox_callbacks SET processed_at = now()');
    const a = await embedded();
    const auth = { authorization: `Bearer ${a.credential}` };
    const sent = {
      lone: Buffer.from(
        '{"statusUpdate":{"taskId":"r\\ud800x\\udc00","status":{"state":"TASK_STATE_WORKING"},"note":"é🙂\\udfff"}}',
        'utf8',
      ),
      paired: Buffer.from('{"statusUpdate":{"taskId":"r\\ud83d\\ude00","status":{"state":"x"}}}', 'utf8'),
    };
    for (const body of [sent.lone, sent.paired]) expect((await send(a.url, body, auth)).status).toBe(200);
    const stored = await stack.tdb.db.query<{ body_task_id: string; body: string; bytes: Buffer }>(
      `SELECT body_task_id, body, convert_to(body, 'UTF8') AS bytes FROM inbox_callbacks
        WHERE registration_id = $1 ORDER BY id`,
      [a.id],
    );
    expect(stored.rows.map((r) => r.body_task_id)).toEqual(['r\uFFFDx\uFFFD', 'r\u{1F600}']);
    expect(stored.rows[0]!.bytes.equals(sent.lone)).toBe(true);
    expect(stored.rows[1]!.bytes.equals(sent.paired)).toBe(true);
  });
});

describe('inbox metrics', () => {
  /** The inbox's request counter, per `status reason`. */
  async function inboxCounts(): Promise<Map<string, number>> {
    const res = await undiciFetch(`${stack.inboxUrl}/metrics`, { dispatcher: tlsAgent });
    const counts = new Map<string, number>();
    for (const line of (await res.text()).split('\n')) {
      const m = /^a2a_push_inbox_requests_total\{([^}]*)\} (\d+)$/.exec(line);
      if (!m) continue;
      const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
      counts.set(`${labels.status} ${labels.reason}`, Number(m[2]));
    }
    return counts;
  }

  it('counts every callback answer by status and reason, 413 and 401 included', async () => {
    await stack.tdb.db.query('UPDATE inbox_callbacks SET processed_at = now()');
    const a = await embedded();
    const gone = await embedded();
    expect((await stack.api(`/v1/registrations/${gone.id}`, { method: 'DELETE' })).status).toBe(204);
    const auth = { authorization: `Bearer ${a.credential}` };
    const before = await inboxCounts();

    const statuses: number[] = [];
    const send = async (url: string, init: Parameters<typeof callback>[1]) =>
      statuses.push((await callback(url, init)).status);
    await send(a.url, {});
    await send(a.url, { headers: { authorization: 'Bearer wrong' } });
    await send(a.url, { headers: auth, body: JSON.stringify({ task: { x: 'a'.repeat(1024 * 1024) } }) });
    await send(a.url, { headers: { ...auth, 'content-type': 'text/plain' }, body: '{}' });
    await send(a.url, { headers: auth, body: '{"task":' });
    for (let i = 0; i < 4; i++) await send(a.url, { headers: auth }); // the bound is 3
    await send(gone.url, { headers: { authorization: `Bearer ${gone.credential}` } });
    expect(statuses).toEqual([401, 401, 413, 415, 400, 200, 200, 200, 429, 200]);

    const after = await inboxCounts();
    const delta = Object.fromEntries(
      [...after].map(([k, n]) => [k, n - (before.get(k) ?? 0)]).filter(([, d]) => d !== 0),
    );
    expect(delta).toEqual({
      '401 unauthorized': 2,
      '413 other': 1,
      '415 media_type': 1,
      '400 invalid': 1,
      '200 stored': 3,
      '429 bound_registration': 1,
      '200 late': 1,
    });
  });
});
