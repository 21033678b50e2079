/**
 * The outbound client against real loopback sockets. Every target here is in 127.0.0.0/8 or ::1:
 * refused cases point at a listening loopback socket so that a guard bug shows up as a connection
 * there, never as traffic elsewhere.
 */
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { compilePolicy, guardRefusals, type GuardRule, type Resolver } from '../../src/outbound/guard';
import {
  OutboundError,
  createOutboundClient,
  type OutboundClient,
  type OutboundRequest,
} from '../../src/outbound/http';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { makeTestTls } from '../helpers/tls';

const tls = makeTestTls();
const loopback = compilePolicy('127.0.0.0/8,::1', '');
const none = compilePolicy('', '');

/** A resolver from a fixed table; records every name it is asked for. */
function fakeResolver(table: Record<string, string[]>): Resolver & { calls: string[] } {
  const calls: string[] = [];
  const fn = async (hostname: string): Promise<Array<{ address: string; family: number }>> => {
    calls.push(hostname);
    const answers = table[hostname];
    if (answers === undefined)
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return Object.assign(fn, { calls });
}

/** A plain TCP listener that only counts connections: the would-be target of a refused request. */
async function countingListener(
  host: string,
  port = 0,
): Promise<{ port: number; count: () => number; close: () => Promise<void> }> {
  let n = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    n += 1;
    sockets.add(s);
    s.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    count: () => n,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

async function outcome(p: Promise<unknown>): Promise<OutboundError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof OutboundError) return err;
    throw err;
  }
  throw new Error('expected the call to fail');
}

async function refusalCount(rule: GuardRule): Promise<number> {
  return (await guardRefusals.get()).values.find((v) => v.labels.rule === rule)?.value ?? 0;
}

const get = (url: string, extra: Partial<OutboundRequest> = {}): OutboundRequest => ({
  method: 'GET',
  url,
  timeoutMs: 2000,
  maxResponseBytes: 64 * 1024,
  ...extra,
});

describe('refused requests make no connection', () => {
  let v4: Awaited<ReturnType<typeof countingListener>>;
  let v6: Awaited<ReturnType<typeof countingListener>>;
  let client: OutboundClient;
  const resolver = fakeResolver({
    'loop.example.test': ['127.0.0.1'],
    'mapped.example.test': ['::ffff:127.0.0.1'],
    'six.example.test': ['::1'],
    'both.example.test': ['127.0.0.1', '::1'],
  });

  beforeAll(async () => {
    v4 = await countingListener('127.0.0.1');
    v6 = await countingListener('::1');
    client = createOutboundClient({ policy: none, resolver, ca: tls.caPem });
  });
  afterAll(async () => {
    await client.close();
    await v4.close();
    await v6.close();
  });
  afterEach(() => {
    expect(v4.count()).toBe(0);
    expect(v6.count()).toBe(0);
  });

  const literal = (p: () => number, six = false): Array<[string, () => string]> =>
    six
      ? [
          ['[::1]', () => `https://[::1]:${p()}/`],
          ['[0:0:0:0:0:0:0:1]', () => `https://[0:0:0:0:0:0:0:1]:${p()}/`],
        ]
      : [
          ['127.0.0.1', () => `https://127.0.0.1:${p()}/hook`],
          ['decimal 2130706433', () => `https://2130706433:${p()}/`],
          ['octal 0177.0.0.1', () => `https://0177.0.0.1:${p()}/`],
          ['hex 0x7f.1', () => `https://0x7f.1:${p()}/`],
          ['short 127.1', () => `https://127.1:${p()}/`],
          ['trailing dot 127.0.0.1.', () => `https://127.0.0.1.:${p()}/`],
          ['mapped [::ffff:127.0.0.1]', () => `https://[::ffff:127.0.0.1]:${p()}/`],
        ];

  it.each([...literal(() => v4.port), ...literal(() => v6.port, true)])(
    'literal %s is refused with private_address',
    async (_name, url) => {
      const before = await refusalCount('private_address');
      const err = await outcome(client.request(get(url())));
      expect(err).toMatchObject({ code: 'guard_refused', rule: 'private_address' });
      expect(await refusalCount('private_address')).toBe(before + 1);
    },
  );

  it.each([
    ['loop.example.test', () => v4.port],
    ['mapped.example.test', () => v4.port],
    ['six.example.test', () => v6.port],
    ['both.example.test', () => v4.port],
  ])('a name resolving to loopback (%s) is refused with private_address', async (name, port) => {
    const err = await outcome(client.request(get(`https://${name}:${port()}/`)));
    expect(err).toMatchObject({ code: 'guard_refused', rule: 'private_address' });
    expect(err.message).toContain(name);
  });

  it.each([
    ['localhost', 'forbidden_host'],
    ['localhost.', 'forbidden_host'],
    ['api.localhost', 'forbidden_host'],
  ] as const)('%s is refused with %s before any lookup', async (host, rule) => {
    const calls = resolver.calls.length;
    const err = await outcome(client.request(get(`https://${host}:${v4.port}/`)));
    expect(err).toMatchObject({ code: 'guard_refused', rule });
    expect(resolver.calls.length).toBe(calls);
  });

  it('http: is refused with scheme', async () => {
    const err = await outcome(client.request(get(`http://loop.example.test:${v4.port}/`)));
    expect(err).toMatchObject({ code: 'guard_refused', rule: 'scheme' });
  });

  it('a denied range wins over the allow list, literal and resolved', async () => {
    const denied = createOutboundClient({ policy: compilePolicy('127.0.0.0/8', '127.0.0.1'), resolver });
    try {
      const before = await refusalCount('denied_cidr');
      expect(await outcome(denied.request(get(`https://127.0.0.1:${v4.port}/`)))).toMatchObject({
        code: 'guard_refused',
        rule: 'denied_cidr',
      });
      expect(await outcome(denied.request(get(`https://loop.example.test:${v4.port}/`)))).toMatchObject({
        code: 'guard_refused',
        rule: 'denied_cidr',
      });
      expect(await refusalCount('denied_cidr')).toBe(before + 2);
    } finally {
      await denied.close();
    }
  });

  it('the guarded fetch refuses the same, as an OutboundError', async () => {
    for (const url of [`https://127.0.0.1:${v4.port}/`, `https://loop.example.test:${v4.port}/`]) {
      const err = await outcome(client.fetch(url));
      expect(err).toMatchObject({ code: 'guard_refused', rule: 'private_address' });
    }
    expect(await outcome(client.fetch(new URL(`https://user:pw@example.test:${v4.port}/`)))).toMatchObject({
      code: 'guard_refused',
      rule: 'userinfo',
    });
  });
});

describe('resolution', () => {
  let a: Receiver;
  let b: Receiver;

  beforeAll(async () => {
    // Same port on two loopback addresses, so only the address tells them apart.
    for (let attempt = 0; ; attempt += 1) {
      a = await startReceiver({ host: '127.0.0.2', tls });
      try {
        b = await startReceiver({ host: '127.0.0.1', port: a.port, tls });
        break;
      } catch (err) {
        await a.close();
        if (attempt >= 5) throw err;
      }
    }
  });
  afterAll(async () => {
    await a.close();
    await b.close();
  });

  it('127.0.0.2 is bindable here (the rebinding tests need a second loopback address)', () => {
    expect(a.host).toBe('127.0.0.2');
    expect(b.port).toBe(a.port);
  });

  it('DNS rebinding: the connection goes to the answer that was judged, and a later private answer is refused', async () => {
    const answers = [['127.0.0.2'], ['127.0.0.1']];
    let calls = 0;
    const resolver: Resolver = async () => {
      const pick = answers[Math.min(calls, answers.length - 1)] ?? [];
      calls += 1;
      return pick.map((address) => ({ address, family: 4 }));
    };
    const client = createOutboundClient({
      policy: compilePolicy('127.0.0.2/32', ''),
      resolver,
      ca: tls.caPem,
    });
    // Closing after each answer makes the second request open (and so resolve) a new connection.
    a.setScript(() => ({ status: 200, headers: { connection: 'close' }, body: 'a' }));
    const startA = a.requests.length;
    try {
      const url = `https://rebind.example.test:${a.port}/hook`;
      const res = await client.request(get(url));
      expect(res.status).toBe(200);
      expect(res.body.toString()).toBe('a');
      expect(calls).toBe(1);
      const seen = a.requests[startA];
      expect(seen?.headers.host).toBe(`rebind.example.test:${a.port}`);
      expect(seen?.servername).toBe('rebind.example.test');
      expect(seen?.localAddress).toBe('127.0.0.2');

      const err = await outcome(client.request(get(url)));
      expect(err).toMatchObject({ code: 'guard_refused', rule: 'private_address' });
      expect(calls).toBe(2);
      expect(a.requests.length).toBe(startA + 1);
      expect(b.connections).toBe(0);
    } finally {
      a.setScript(() => ({ status: 200, body: 'ok' }));
      await client.close();
    }
  });

  it('a pooled connection is reused without a new lookup (it stays on the judged address)', async () => {
    const resolver = fakeResolver({ 'pool.example.test': ['127.0.0.2'] });
    const client = createOutboundClient({
      policy: compilePolicy('127.0.0.2/32', ''),
      resolver,
      ca: tls.caPem,
    });
    const before = a.connections;
    try {
      for (let i = 0; i < 6; i += 1) {
        expect((await client.request(get(`https://pool.example.test:${a.port}/`))).status).toBe(200);
      }
      // One lookup per new connection, none per reuse.
      expect(resolver.calls.length).toBe(a.connections - before);
      expect(resolver.calls.length).toBeLessThan(6);
      expect(b.connections).toBe(0);
    } finally {
      await client.close();
    }
  });

  it('mixed allowed and refused answers are refused, and neither address is connected to', async () => {
    const resolver = fakeResolver({ 'mixed.example.test': ['127.0.0.2', '127.0.0.1'] });
    const client = createOutboundClient({
      policy: compilePolicy('127.0.0.2/32', ''),
      resolver,
      ca: tls.caPem,
    });
    const before = a.connections;
    try {
      const err = await outcome(client.request(get(`https://mixed.example.test:${a.port}/`)));
      expect(err).toMatchObject({ code: 'guard_refused', rule: 'private_address' });
      expect(err.message).toContain('127.0.0.1');
      expect(a.connections).toBe(before);
      expect(b.connections).toBe(0);
    } finally {
      await client.close();
    }
  });

  it.each([
    ['an empty answer', async (): Promise<Array<{ address: string; family: number }>> => [], 'ENODATA'],
    [
      'ENOTFOUND',
      async (): Promise<never> =>
        Promise.reject(Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' })),
      'ENOTFOUND',
    ],
    [
      'EAI_AGAIN',
      async (): Promise<never> =>
        Promise.reject(Object.assign(new Error('getaddrinfo EAI_AGAIN'), { code: 'EAI_AGAIN' })),
      'EAI_AGAIN',
    ],
  ])('%s is code dns', async (_name, resolver, detail) => {
    const client = createOutboundClient({ policy: loopback, resolver, ca: tls.caPem });
    try {
      const err = await outcome(client.request(get(`https://gone.example.test:${a.port}/`)));
      expect(err).toMatchObject({ code: 'dns', detail });
      const viaFetch = await outcome(client.fetch(`https://gone.example.test:${a.port}/`));
      expect(viaFetch).toMatchObject({ code: 'dns', detail });
      expect(b.connections).toBe(0);
    } finally {
      await client.close();
    }
  });
});

describe('the client', () => {
  let rx: Receiver;
  let other: Receiver;
  let client: OutboundClient;
  const resolver = fakeResolver({
    'receiver.test': ['127.0.0.1'],
    'nomatch.invalid-name.test': ['127.0.0.1'],
  });

  beforeAll(async () => {
    rx = await startReceiver({ tls });
    other = await startReceiver({ tls });
    client = createOutboundClient({ policy: loopback, resolver, ca: tls.caPem });
  });
  beforeEach(() =>
    rx.setScript(() => ({ status: 200, headers: { 'content-type': 'text/plain' }, body: 'ok' })),
  );
  afterAll(async () => {
    await client.close();
    await rx.close();
    await other.close();
  });

  it('POSTs a body and returns status, headers and body', async () => {
    rx.setScript(() => ({ status: 202, headers: { 'x-answer': 'yes' }, body: 'accepted' }));
    const res = await client.request({
      ...get(`https://receiver.test:${rx.port}/hook?x=1`),
      method: 'POST',
      headers: { 'content-type': 'application/json', host: 'evil.example' },
      body: '{"a":1}',
    });
    expect(res).toMatchObject({ status: 202, truncated: false });
    expect(res.headers['x-answer']).toBe('yes');
    expect(res.body.toString()).toBe('accepted');
    const seen = rx.requests.at(-1);
    expect(seen).toMatchObject({ method: 'POST', path: '/hook?x=1', servername: 'receiver.test' });
    expect(seen?.body.toString()).toBe('{"a":1}');
    // A caller's Host header cannot split Host from the name that was resolved and verified.
    expect(seen?.headers.host).toBe(`receiver.test:${rx.port}`);
  });

  it('reaches an IPv6 loopback receiver by literal address', async () => {
    const six = await startReceiver({ host: '::1', tls });
    try {
      const res = await client.request(get(six.url));
      expect(res.status).toBe(200);
      expect(six.requests[0]?.remoteAddress).toBe('::1');
    } finally {
      await six.close();
    }
  });

  it('returns a 302 without following it', async () => {
    rx.setScript(() => ({ status: 302, headers: { location: other.url } }));
    const res = await client.request(get(rx.url));
    expect(res.status).toBe(302);
    expect(res.headers.location).toBe(other.url);
    const viaFetch = await client.fetch(rx.url);
    expect(viaFetch.status).toBe(302);
    expect(viaFetch.headers.get('location')).toBe(other.url);
    expect(other.connections).toBe(0);
  });

  // How long a timeout takes is not measured here (bench/ times things): these show that the call
  // ends as a timeout at all, where nothing but the client's deadline can end it.
  it('times out a receiver that never answers', async () => {
    rx.setScript(() => ({ hang: true }));
    const err = await outcome(client.request(get(rx.url, { timeoutMs: 300 })));
    expect(err.code).toBe('timeout');
  });

  it("the caller's signal ends a request that would never end: it rejects with the signal's reason, not an OutboundError", async () => {
    rx.setScript(() => ({ hang: true }));
    const controller = new AbortController();
    const reason = new Error('cancelled by the caller');
    const call = client.request(get(rx.url, { timeoutMs: 60_000, signal: controller.signal }));
    await rx.waitFor(rx.requests.length + 1);
    controller.abort(reason);
    await expect(call).rejects.toBe(reason);
    // A signal already aborted sends nothing.
    const before = rx.requests.length;
    await expect(client.request(get(rx.url, { signal: controller.signal }))).rejects.toBe(reason);
    expect(rx.requests.length).toBe(before);
  });

  it('bounds the whole exchange: a body that keeps arriving, a byte at a time, still times out', async () => {
    // Each byte comes well within the per-read timeout: only a deadline on the whole exchange ends it.
    rx.setScript(() => ({
      status: 200,
      headers: { 'content-length': '100000' },
      body: 'partial',
      trickleMs: 50,
    }));
    const err = await outcome(client.request(get(rx.url, { timeoutMs: 300 })));
    expect(err.code).toBe('timeout');
  });

  it('bounds the whole exchange: a resolver that never answers times out', async () => {
    const stuck = createOutboundClient({ policy: loopback, resolver: () => new Promise(() => undefined) });
    try {
      const err = await outcome(stuck.request(get(`https://receiver.test:${rx.port}/`, { timeoutMs: 200 })));
      expect(err.code).toBe('timeout');
    } finally {
      await stuck.close();
    }
  });

  it('close() waits for calls in flight, then refuses new ones', async () => {
    const closing = createOutboundClient({ policy: loopback, resolver, ca: tls.caPem });
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    rx.setScript(() => ({ status: 200, body: 'late', gate: answered }));
    const seen = rx.requests.length;
    const order: string[] = [];
    const pending = closing.request(get(rx.url)).then((r) => {
      order.push('answer');
      return r;
    });
    await rx.waitFor(seen + 1); // the call is on the wire
    const closed = closing.close().then(() => order.push('closed'));
    answer();
    await closed;
    expect(order).toEqual(['answer', 'closed']);
    expect((await pending).body.toString()).toBe('late');
    expect(await outcome(closing.request(get(rx.url)))).toMatchObject({ code: 'connection' });
  });

  it('stops reading at the response cap and says the body was truncated', async () => {
    rx.setScript(() => ({ status: 200, body: 'x'.repeat(10 * 1024 * 1024) }));
    const res = await client.request(get(rx.url, { maxResponseBytes: 64 * 1024 }));
    expect(res.truncated).toBe(true);
    expect(res.body.length).toBe(64 * 1024);
  });

  it('a body of exactly the cap is not truncated', async () => {
    rx.setScript(() => ({ status: 200, body: 'y'.repeat(1024) }));
    const res = await client.request(get(rx.url, { maxResponseBytes: 1024 }));
    expect(res).toMatchObject({ truncated: false });
    expect(res.body.length).toBe(1024);
  });

  it('connection refused is code connection', async () => {
    const closed = await countingListener('127.0.0.1');
    await closed.close();
    const err = await outcome(client.request(get(`https://127.0.0.1:${closed.port}/`)));
    expect(err).toMatchObject({ code: 'connection', detail: 'ECONNREFUSED' });
  });

  it('a reset connection is code connection', async () => {
    rx.setScript(() => ({ destroy: true }));
    const err = await outcome(client.request(get(rx.url)));
    expect(err.code).toBe('connection');
  });

  it('an untrusted certificate is code tls', async () => {
    const untrusting = createOutboundClient({ policy: loopback, resolver });
    try {
      const err = await outcome(untrusting.request(get(rx.url)));
      expect(err).toMatchObject({ code: 'tls', detail: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' });
      expect(await outcome(untrusting.fetch(rx.url))).toMatchObject({ code: 'tls' });
    } finally {
      await untrusting.close();
    }
  });

  it('a certificate for another name is code tls', async () => {
    const err = await outcome(client.request(get(`https://nomatch.invalid-name.test:${rx.port}/`)));
    expect(err).toMatchObject({ code: 'tls', detail: 'ERR_TLS_CERT_ALTNAME_INVALID' });
  });

  it('the guarded fetch GETs and POSTs', async () => {
    rx.setScript((req) => ({
      status: 200,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ got: req.method }),
    }));
    const g = await client.fetch(`https://receiver.test:${rx.port}/card`);
    expect(g.status).toBe(200);
    expect(await g.json()).toEqual({ got: 'GET' });
    const p = await client.fetch(
      new Request(`https://receiver.test:${rx.port}/rpc`, { method: 'POST', body: '{"q":1}' }),
      {
        headers: { 'content-type': 'application/json' },
      },
    );
    expect(await p.json()).toEqual({ got: 'POST' });
    const seen = rx.requests.at(-1);
    expect(seen?.body.toString()).toBe('{"q":1}');
    expect(seen?.headers['content-type']).toBe('application/json');
    expect(seen?.headers.host).toBe(`receiver.test:${rx.port}`);
  });

  it('the guarded fetch bounds the whole exchange and caps the body', async () => {
    const short = createOutboundClient({
      policy: loopback,
      resolver,
      ca: tls.caPem,
      fetchTimeoutMs: 300,
      fetchMaxResponseBytes: 1000,
    });
    try {
      rx.setScript(() => ({ status: 200, body: 'z'.repeat(5000) }));
      const res = await short.fetch(rx.url);
      expect((await res.arrayBuffer()).byteLength).toBe(1000);
      rx.setScript(() => ({ status: 200, body: 'part', trickleMs: 50 }));
      expect(await outcome(short.fetch(rx.url))).toMatchObject({ code: 'timeout' });
    } finally {
      await short.close();
    }
  });

  it("the guarded fetch leaves the caller's own abort as an AbortError", async () => {
    rx.setScript(() => ({ hang: true }));
    const controller = new AbortController();
    const seen = rx.requests.length;
    const p = client.fetch(rx.url, { signal: controller.signal });
    await rx.waitFor(seen + 1);
    controller.abort();
    await expect(p).rejects.toMatchObject({ name: 'AbortError' });
  });
});
