/**
 * The address-guard corpus (test/helpers/guard-corpus.ts) through the public surface of the service:
 *
 * - every refused `url` case is a 400 `guard_refused` at config creation, naming its rule, with no
 *   config row written;
 * - every refused `dns` case (a host name whose fake answers must be refused) is created (the API
 *   does not resolve names), then refused at delivery time by the worker's outbound client: the job
 *   and the config end `stopped` with `guard_refused:<rule>`, and the listening sockets on the
 *   would-be targets see no connection;
 * - allowed URLs are accepted at creation and never delivered to.
 *
 * Loopback only. Every target is in 127.0.0.0/8 or ::1, and a tripwire on net.Socket#connect
 * refuses (and records) any connection of this process to an address outside them, so a guard bug
 * shows up as a failed test, never as traffic to 10.0.0.5 or 169.254.169.254.
 */
import crypto from 'node:crypto';
import dns, { type LookupAddress } from 'node:dns';
import net, { createServer, isIP, type AddressInfo, type LookupFunction, type Socket } from 'node:net';
import ipaddr from 'ipaddr.js';
import type { Resolver } from '../../src/outbound';
import { ALLOWED, REFUSED, type GuardCase, type RefusedCase } from '../helpers/guard-corpus';
import {
  connectDevServer,
  createConfig,
  eventually,
  jobRow,
  json,
  startStack,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

jest.setTimeout(60_000);

// ---------------------------------------------------------------------------------------------
// Tripwire: no connection of this process may leave the loopback, whatever the service does.
// ---------------------------------------------------------------------------------------------

interface Reached {
  /** the host name or literal the socket was asked to connect to */
  host: string;
  /** the addresses the connect-time lookup produced (the literal itself for literals) */
  addresses: string[];
  /** true when the tripwire refused the connection because an address was outside the loopback */
  blocked: boolean;
}

/** Every name-based connection that got past its lookup, and every blocked literal. */
const reached: Reached[] = [];

function isLoopback(ip: string): boolean {
  const bare = (ip.startsWith('[') && ip.endsWith(']') ? ip.slice(1, -1) : ip).split('%')[0] ?? '';
  const family = isIP(bare);
  if (family === 4) return ipaddr.IPv4.parse(bare).range() === 'loopback';
  if (family === 6) {
    const a = ipaddr.IPv6.parse(bare);
    if (a.isIPv4MappedAddress()) return a.toIPv4Address().range() === 'loopback';
    return a.range() === 'loopback';
  }
  return false;
}

const realConnect = net.Socket.prototype.connect;

function installTripwire(): void {
  const patched = function (this: Socket, ...args: unknown[]): Socket {
    const first = args[0];
    // net.connect passes [options, cb] with a marker; tls.connect passes an options object.
    const opts = (Array.isArray(first) ? first[0] : first) as Record<string, unknown> | undefined;
    if (opts !== null && typeof opts === 'object' && !opts.path) {
      const host = typeof opts.host === 'string' ? opts.host : 'localhost';
      const bare = host.startsWith('[') ? host.slice(1, -1) : host;
      if (isIP(bare) !== 0) {
        // Node does no lookup for a literal: judge it here.
        if (!isLoopback(bare)) {
          reached.push({ host, addresses: [bare], blocked: true });
          process.nextTick(() => this.destroy(new Error(`tripwire: connection to ${bare} refused`)));
          return this;
        }
      } else {
        const inner = (typeof opts.lookup === 'function' ? opts.lookup : dns.lookup) as LookupFunction;
        const wrapped: LookupFunction = (hostname, options, callback) =>
          inner(hostname, options, (err, address, family) => {
            if (err) return callback(err, address, family);
            const list = Array.isArray(address)
              ? (address as LookupAddress[]).map((a) => a.address)
              : [address as string];
            const outside = list.some((a) => !isLoopback(a));
            reached.push({ host: hostname, addresses: list, blocked: outside });
            if (outside) {
              const e = Object.assign(new Error(`tripwire: ${hostname} -> ${list.join(', ')} refused`), {
                code: 'ETRIPWIRE',
              });
              return callback(e, '', 0);
            }
            return callback(null, address, family);
          });
        opts.lookup = wrapped;
      }
    }
    return (realConnect as (...a: unknown[]) => Socket).apply(this, args);
  };
  net.Socket.prototype.connect = patched as typeof realConnect;
}

// ---------------------------------------------------------------------------------------------
// Fake DNS for the worker, counting listeners, stacks by policy
// ---------------------------------------------------------------------------------------------

const norm = (hostname: string): string => hostname.toLowerCase().replace(/\.+$/, '');

const answersByHost = new Map<string, string[]>();
const asked: string[] = [];
const resolver: Resolver = async (hostname) => {
  const h = norm(hostname);
  asked.push(h);
  const answers = answersByHost.get(h);
  if (answers === undefined)
    throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
  return answers.map((address) => ({ address, family: isIP(address.split('%')[0] ?? '') || 4 }));
};

interface Listener {
  port: number;
  hosts: string[];
  connections: () => number;
  close: () => Promise<void>;
}

/**
 * A plain TCP listener on 127.0.0.1 that only counts connections, plus the same port on every other
 * loopback address among `alsoOn` that can be bound (127.0.0.2, ::1): wherever a connection to a
 * loopback answer of the case would land, a socket is listening and counting.
 */
async function countingListener(alsoOn: string[]): Promise<Listener> {
  let n = 0;
  const servers: net.Server[] = [];
  const hosts: string[] = [];
  const listen = (host: string, port: number) =>
    new Promise<net.Server | null>((resolve) => {
      const server = createServer((s) => {
        n += 1;
        s.destroy();
      });
      server.once('error', () => resolve(null));
      server.listen(port, host, () => resolve(server));
    });
  const main = await listen('127.0.0.1', 0);
  if (main === null) throw new Error('cannot listen on 127.0.0.1');
  servers.push(main);
  hosts.push('127.0.0.1');
  const port = (main.address() as AddressInfo).port;
  for (const raw of alsoOn) {
    const bare = raw.split('%')[0] ?? '';
    let host: string;
    if (isIP(bare) === 6 && ipaddr.IPv6.parse(bare).isIPv4MappedAddress())
      host = ipaddr.IPv6.parse(bare).toIPv4Address().toString();
    else host = bare;
    if (!isLoopback(host) || hosts.includes(host) || isIP(host) === 0) continue;
    const extra = await listen(host, port);
    if (extra !== null) {
      servers.push(extra);
      hosts.push(host);
    }
  }
  return {
    port,
    hosts,
    connections: () => n,
    close: () =>
      Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve())))).then(
        () => undefined,
      ),
  };
}

interface Policy {
  allow: string;
  deny: string;
}
const policyOf = (c: Pick<GuardCase, 'allow' | 'deny'>): Policy => ({
  allow: c.allow ?? '',
  deny: c.deny ?? '',
});
const policyKey = (p: Policy): string => `allow=[${p.allow}] deny=[${p.deny}]`;

/** The positive control: a name the policy allows, resolving to the loopback receiver. */
const CONTROL_POLICY: Policy = { allow: '127.0.0.0/8', deny: '' };
const CONTROL_HOST = 'control.example.com'; // covered by the test certificate's *.example.com

const label = (c: GuardCase, i: number): string => {
  const input = c.input.length > 80 ? `${c.input.slice(0, 40)}…(${c.input.length} chars)` : c.input;
  const answers = c.answers ? ` -> [${c.answers.join(', ')}]` : '';
  const policy = `${c.allow ? ` allow=${c.allow}` : ''}${c.deny ? ` deny=${c.deny}` : ''}`;
  return `#${i} ${input}${answers}${policy} (${c.note})`;
};

const indexed = <T extends GuardCase>(list: T[]) => list.map((c, i) => ({ c, i }));
const refusedUrl = indexed(REFUSED).filter(({ c }) => c.kind === 'url');
const refusedDns = indexed(REFUSED).filter(({ c }) => c.kind === 'dns');
const allowed = indexed(ALLOWED);

/**
 * A dns case's URL, on its own host name (a label in front of the case's host, so that cases with
 * different answers can share one fake resolver) and on the port of its listener. The rest of the
 * spelling (trailing dot, IDNA, path) is the case's.
 */
function deliveryUrl(c: RefusedCase, i: number, port: number): string {
  const m = /^https:\/\/([^/:?#]+)(.*)$/.exec(c.input);
  if (!m) throw new Error(`dns case #${i} is not an https URL with a host: ${c.input}`);
  return `https://case${i}.${m[1]}:${port}${m[2]}`;
}

interface DnsRun {
  c: RefusedCase;
  i: number;
  stack: Stack;
  taskId: string;
  url: string;
  host: string;
  jobId: string;
  listener: Listener;
}

let temporal: Awaited<ReturnType<typeof connectDevServer>>;
const stacks = new Map<string, Stack>();
const dnsRuns = new Map<number, DnsRun>();
const listeners: Listener[] = [];
let control: { stack: Stack; receiver: Receiver; jobId: string; taskId: string } | undefined;
const queue = `guard-api-${crypto.randomBytes(4).toString('hex')}`;

const stackFor = (c: Pick<GuardCase, 'allow' | 'deny'>): Stack => {
  const s = stacks.get(policyKey(policyOf(c)));
  if (!s) throw new Error(`no stack for ${policyKey(policyOf(c))}`);
  return s;
};

const problemBody = async (res: Response) => {
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  return (await res.json()) as Record<string, unknown> & { errors?: Array<{ path: string }> };
};

const configCount = async (stack: Stack, taskId: string): Promise<number> =>
  Number(
    (await stack.tdb.db.query('SELECT count(*) AS n FROM push_configs WHERE task_id = $1', [taskId])).rows[0]
      .n,
  );

const FINAL = new Set([
  'delivered',
  'failed',
  'exhausted',
  'expired',
  'cancelled',
  'superseded',
  'auth_failed',
  'stopped',
]);

beforeAll(async () => {
  installTripwire();
  temporal = await connectDevServer();

  // One stack per distinct policy; API and worker share it (the worker's default allow-list of the
  // harness, 127.0.0.0/8, is overridden: an absent allow/deny is the empty list).
  const policies = new Map<string, Policy>();
  for (const c of [...REFUSED, ...ALLOWED, CONTROL_POLICY]) policies.set(policyKey(policyOf(c)), policyOf(c));
  // Started together (a stack takes about a second); each is kept as soon as it is up, so that
  // afterAll closes it even if another fails to start.
  let n = 0;
  const results = await Promise.allSettled(
    [...policies].map(async ([key, p]) => {
      const stack = await startStack(temporal, `${queue}-${n++}`, {
        env: { OUTBOUND_ALLOW_CIDRS: p.allow, OUTBOUND_DENY_CIDRS: p.deny },
        resolver,
      });
      stacks.set(key, stack);
    }),
  );
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;

  // The dns cases: all started now, so that their deliveries run concurrently; each test then
  // awaits its own.
  await Promise.all(
    refusedDns.map(async ({ c, i }) => {
      const stack = stackFor(c);
      const listener = await countingListener(c.answers ?? []);
      listeners.push(listener);
      const url = deliveryUrl(c, i, listener.port);
      const host = norm(new URL(url).hostname);
      answersByHost.set(host, c.answers ?? []);
      const taskId = `task-dns-${i}`;
      await createConfig(stack, taskId, { id: 'c', url });
      const ev = await writeEvent(stack, taskId, { task: { id: taskId } });
      if (ev.deliveries.length !== 1) throw new Error(`dns case #${i}: ${ev.deliveries.length} deliveries`);
      dnsRuns.set(i, { c, i, stack, taskId, url, host, jobId: ev.deliveries[0]!.id, listener });
    }),
  );

  // The control: same path, a policy that lifts the loopback, a receiver that answers 200.
  const receiver = await startReceiver();
  answersByHost.set(CONTROL_HOST, ['127.0.0.1']);
  const cstack = stackFor(CONTROL_POLICY);
  const taskId = 'task-dns-control';
  await createConfig(cstack, taskId, { id: 'c', url: `https://${CONTROL_HOST}:${receiver.port}/hook` });
  const ev = await writeEvent(cstack, taskId, { task: { id: taskId } });
  control = { stack: cstack, receiver, jobId: ev.deliveries[0]!.id, taskId };
});

afterAll(async () => {
  await Promise.all([...stacks.values()].map((s) => s.close()));
  await Promise.all(listeners.map((l) => l.close()));
  await control?.receiver.close();
  await temporal?.close();
  net.Socket.prototype.connect = realConnect;
});

describe('the corpus is big enough', () => {
  it('at least 60 refused cases and 10 allowed ones go through the public API here', () => {
    expect(refusedUrl.length + refusedDns.length).toBeGreaterThanOrEqual(60);
    expect(refusedDns.length).toBeGreaterThan(0);
    expect(allowed.length).toBeGreaterThanOrEqual(10);
  });
});

describe('refused URLs: config creation is a 400 guard_refused naming the rule', () => {
  it.each(refusedUrl.map(({ c, i }) => [`${c.rule} ${label(c, i)}`, c, i] as const))(
    '%s',
    async (_name, c, i) => {
      const stack = stackFor(c);
      const taskId = `task-url-${i}`;
      const res = await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs`, {
        method: 'POST',
        json: { id: 'c', url: c.input },
      });
      expect(res.status).toBe(400);
      const body = await problemBody(res);
      expect(body).toMatchObject({
        type: 'urn:a2a-push:problem:guard_refused',
        status: 400,
        rule: c.rule,
      });
      expect(body.errors?.[0]?.path).toBe('url');
      expect(await configCount(stack, taskId)).toBe(0);
    },
  );
});

describe('refused DNS answers: the delivery stops the config and nothing is connected to', () => {
  it.each(refusedDns.map(({ c, i }) => [`${c.rule} ${label(c, i)}`, i] as const))('%s', async (_name, i) => {
    const run = dnsRuns.get(i)!;
    const passed = () => reached.filter((r) => norm(r.host) === run.host);
    // Until the job ends, or (a bug) a connection got past the guard: then fail at once, showing it.
    const { job } = await eventually(
      async () => ({
        job: await jobRow(run.stack, run.jobId),
        seen: run.listener.connections() + passed().length,
      }),
      (v) => FINAL.has(v.job.status) || v.seen > 0,
    );
    // No socket was opened: none on the listeners, none past the guard's lookup (tripwire) ...
    expect({ listener: run.listener.connections(), pastTheGuard: passed() }).toEqual({
      listener: 0,
      pastTheGuard: [],
    });
    // ... the job and the config stopped, naming the rule ...
    expect(job).toMatchObject({ status: 'stopped', reason: `guard_refused:${run.c.rule}` });
    const cfg = await json(run.stack.api(`/v1/tasks/${run.taskId}/pushNotificationConfigs/c`));
    expect(cfg).toMatchObject({ status: 'stopped', statusReason: `guard_refused:${run.c.rule}` });
    // ... and the refusal was made on the fake answers, at connect time (the resolver was asked).
    expect(asked).toContain(run.host);
  });

  it('control: the same path with an allowed answer does reach the listening socket', async () => {
    const { stack, receiver, jobId } = control!;
    const job = await eventually(
      () => jobRow(stack, jobId),
      (j) => FINAL.has(j.status),
    );
    expect(job.status).toBe('delivered');
    expect(receiver.connections).toBeGreaterThanOrEqual(1);
    expect(receiver.requests[0]?.servername).toBe(CONTROL_HOST);
    expect(reached.filter((r) => norm(r.host) === CONTROL_HOST)).toEqual([
      { host: expect.any(String), addresses: ['127.0.0.1'], blocked: false },
    ]);
  });
});

describe('allowed URLs: accepted at creation (never delivered to)', () => {
  it.each(allowed.map(({ c, i }) => [label(c, i), c, i] as const))('%s', async (_name, c, i) => {
    const stack = stackFor(c);
    const taskId = `task-ok-${i}`;
    const res = await stack.api(`/v1/tasks/${taskId}/pushNotificationConfigs`, {
      method: 'POST',
      json: { id: 'c', url: c.input },
    });
    const body = (await res.json()) as Record<string, unknown>;
    expect({ status: res.status, body }).toMatchObject({ status: 201, body: { status: 'active' } });
    expect(await configCount(stack, taskId)).toBe(1);
    const jobs = await stack.tdb.db.query('SELECT 1 FROM delivery_jobs WHERE task_id = $1', [taskId]);
    expect(jobs.rowCount).toBe(0);
  });
});

describe('loopback only', () => {
  it('no connection of this test file was attempted outside 127.0.0.0/8 and ::1', () => {
    expect(reached.filter((r) => r.blocked)).toEqual([]);
  });
});
