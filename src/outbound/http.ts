/**
 * The one outbound HTTPS client (contract §4). Every outside call leaves the process here, after the
 * address guard, on a connection pinned to an address the guard accepted.
 *
 * Pinning: the undici Agent's connect-time `lookup` resolves the name and judges every answer, and
 * the socket connects to exactly those answers. There is no separate pre-check, so a DNS answer that
 * changes between "check" and "connect" has nothing to change: they are the same answer. URLs with
 * a literal IP never reach `lookup` (Node skips it), so checkUrlStatic judges those before dispatch.
 */
import type { LookupAddress, LookupOptions } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import type { Readable } from 'node:stream';
import { createSecureContext, rootCertificates } from 'node:tls';
import { Agent, fetch as undiciFetch, request as undiciRequest } from 'undici';
import {
  checkUrlStatic,
  countRefusal,
  judgeAnswers,
  systemResolver,
  type AddressPolicy,
  type Resolver,
} from './guard';
import { withClientSpan } from '../tracing';
import {
  classify,
  errorCode,
  LookupFailure,
  LookupRefusal,
  OutboundError,
  TimeoutReason,
  type OutboundErrorCode,
} from './errors';

export { OutboundError, type OutboundErrorCode };

export interface OutboundOptions {
  policy: AddressPolicy;
  resolver?: Resolver;
  /** extra trusted CA (PEM), added to Node's bundled roots */
  ca?: string | Buffer;
  /** per-origin connection pool size */
  connections?: number;
  /** whole-exchange bound of the guarded fetch (default FETCH_TIMEOUT_MS); tests shorten it */
  fetchTimeoutMs?: number;
  /** response cap of the guarded fetch (default FETCH_MAX_RESPONSE_BYTES) */
  fetchMaxResponseBytes?: number;
}

export interface OutboundRequest {
  method: 'GET' | 'POST' | 'DELETE' | 'PUT' | 'PATCH';
  url: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** bounds the whole exchange: resolve + connect + TLS + headers + body */
  timeoutMs: number;
  /** read at most this many body bytes, then stop reading and drop the connection */
  maxResponseBytes: number;
  /**
   * The caller's cancellation (e.g. a Temporal activity's): aborts the exchange, which then rejects
   * with the signal's reason as it is (not an OutboundError: no answer, no transport failure).
   */
  signal?: AbortSignal;
}

export interface OutboundResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  truncated: boolean;
}

export interface OutboundClient {
  request(req: OutboundRequest): Promise<OutboundResponse>;
  fetch: (input: string | URL | Request, init?: RequestInit) => Promise<Response>;
  close(): Promise<void>;
}

export const FETCH_TIMEOUT_MS = 15_000;
export const FETCH_MAX_RESPONSE_BYTES = 4 * 1024 * 1024;
const DEFAULT_CONNECTIONS = 32;
// Bounds how long a pooled connection outlives its lookup, whatever Keep-Alive hint a server sends.
const KEEP_ALIVE_MS = 4_000;
const KEEP_ALIVE_MAX_MS = 10_000;

async function resolveAndJudge(
  hostname: string,
  policy: AddressPolicy,
  resolver: Resolver,
): Promise<LookupAddress[]> {
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  let answers: Array<{ address: string; family: number }>;
  if (isIP(bare) !== 0) {
    answers = [{ address: bare, family: isIP(bare) }];
  } else {
    try {
      answers = await resolver(hostname);
    } catch (err) {
      const code = errorCode(err) ?? 'ENOTFOUND';
      throw new LookupFailure(code, `cannot resolve ${hostname} (${code})`);
    }
  }
  if (answers.length === 0) throw new LookupFailure('ENODATA', `${hostname} resolved to no address`);
  const refused = judgeAnswers(
    answers.map((a) => a.address),
    policy,
  );
  if (refused !== null) {
    const why = refused.rule === 'denied_cidr' ? 'a denied range' : 'not a public unicast address';
    throw new LookupRefusal(refused.rule, `${hostname} resolves to ${refused.address}: ${why}`);
  }
  // The family comes from the address itself, not from what a resolver claims.
  return answers.map((a) => ({ address: a.address, family: isIP(a.address.split('%')[0] ?? '') }));
}

function pinnedLookup(policy: AddressPolicy, resolver: Resolver): LookupFunction {
  return (hostname: string, options: LookupOptions, callback) => {
    resolveAndJudge(hostname, policy, resolver).then(
      (all) => {
        const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : (options.family ?? 0);
        const usable = family === 4 || family === 6 ? all.filter((a) => a.family === family) : all;
        const first = usable[0];
        if (first === undefined) {
          callback(new LookupFailure('ENODATA', `${hostname} has no IPv${family} address`), '');
        } else if (options.all) {
          callback(null, usable);
        } else {
          callback(null, first.address, first.family);
        }
      },
      (err: Error) => callback(err, ''),
    );
  };
}

async function readCapped(body: Readable, cap: number): Promise<{ body: Buffer; truncated: boolean }> {
  const chunks: Buffer[] = [];
  let size = 0;
  let truncated = false;
  // Leaving the loop early destroys the stream, which makes undici drop the connection: the rest of an
  // oversized body is never read.
  for await (const chunk of body) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    if (size + buf.length > cap) {
      chunks.push(buf.subarray(0, cap - size));
      size = cap;
      truncated = true;
      break;
    }
    chunks.push(buf);
    size += buf.length;
  }
  return { body: Buffer.concat(chunks, size), truncated };
}

async function readStreamCapped(
  stream: ReadableStream<Uint8Array> | null,
  cap: number,
): Promise<{ body: Buffer; truncated: boolean }> {
  if (stream === null) return { body: Buffer.alloc(0), truncated: false };
  const reader = stream.getReader();
  const chunks: Buffer[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { body: Buffer.concat(chunks, size), truncated: false };
    if (size + value.length > cap) {
      chunks.push(Buffer.from(value.subarray(0, cap - size)));
      await reader.cancel();
      return { body: Buffer.concat(chunks, cap), truncated: true };
    }
    chunks.push(Buffer.from(value));
    size += value.length;
  }
}

const noop = (): void => undefined;

/**
 * The whole-exchange bound. Aborting the signal alone is not enough: undici defers the abort of a
 * request that is still waiting for its connection until that connection attempt ends (up to the
 * connect timeout), so the deadline also rejects every race on its own.
 */
function startDeadline(
  ms: number,
  cancel?: AbortSignal,
): {
  signal: AbortSignal;
  race<T>(p: Promise<T>): Promise<T>;
  expired(): boolean;
  cancelled(): boolean;
  clear(): void;
} {
  const controller = new AbortController();
  const reason = new TimeoutReason(ms);
  let fire: (err: unknown) => void = noop;
  const fired = new Promise<never>((_, reject) => {
    fire = reject;
  });
  fired.catch(noop);
  const timer = setTimeout(() => {
    controller.abort(reason);
    fire(reason);
  }, ms);
  // The caller's cancellation ends the exchange the same way, with its own reason.
  const onCancel = () => {
    controller.abort(cancel!.reason);
    fire(cancel!.reason);
  };
  if (cancel?.aborted) onCancel();
  else cancel?.addEventListener('abort', onCancel, { once: true });
  return {
    signal: controller.signal,
    race(p) {
      // The loser of a race may still reject later; that must not become an unhandled rejection.
      p.catch(noop);
      return Promise.race([p, fired]);
    },
    expired: () => controller.signal.aborted && controller.signal.reason === reason,
    cancelled: () => cancel?.aborted === true,
    clear: () => {
      clearTimeout(timer);
      cancel?.removeEventListener('abort', onCancel);
    },
  };
}

/**
 * The Host header is the URL's; a caller-supplied one would split Host from SNI and the pinned name.
 * Trace headers are this client's own: `traceparent` of the call's span (tracing on), never a
 * caller's, and never `tracestate` (nr-llm's, not for third parties).
 */
const DROPPED_HEADERS = new Set(['host', 'traceparent', 'tracestate']);
function withoutHost(headers: Iterable<[string, string]>): Array<[string, string]> {
  return [...headers].filter(([k]) => !DROPPED_HEADERS.has(k.toLowerCase()));
}

const NULL_BODY_STATUS = new Set([101, 103, 204, 205, 304]);

export function createOutboundClient(opts: OutboundOptions): OutboundClient {
  const { policy } = opts;
  const resolver = opts.resolver ?? systemResolver;
  const fetchTimeoutMs = opts.fetchTimeoutMs ?? FETCH_TIMEOUT_MS;
  const fetchCap = opts.fetchMaxResponseBytes ?? FETCH_MAX_RESPONSE_BYTES;
  // tls `ca` replaces the default roots, so the extra CA is appended to them rather than set alone.
  // Built once: a `ca` option alone would make Node parse ~140 root certificates for every new socket.
  const secureContext =
    opts.ca === undefined
      ? undefined
      : createSecureContext({ ca: [...rootCertificates, opts.ca.toString()] });
  const agent = new Agent({
    connections: opts.connections ?? DEFAULT_CONNECTIONS,
    keepAliveTimeout: KEEP_ALIVE_MS,
    keepAliveMaxTimeout: KEEP_ALIVE_MAX_MS,
    connect: { ...(secureContext ? { secureContext } : {}), lookup: pinnedLookup(policy, resolver) },
  });

  const refuseStatic = (url: string): URL => {
    const verdict = checkUrlStatic(url, policy);
    if (verdict.ok) return verdict.url;
    countRefusal(verdict.rule);
    throw new OutboundError('guard_refused', verdict.message, { rule: verdict.rule });
  };
  const fail = (err: unknown, timedOut: boolean): OutboundError => {
    const e = classify(err, timedOut);
    if (e.code === 'guard_refused' && e.rule !== undefined && !(err instanceof OutboundError))
      countRefusal(e.rule);
    return e;
  };

  // Each call runs in a client span (tracing on, src/tracing.ts) that gives it its traceparent header.
  async function request(req: OutboundRequest): Promise<OutboundResponse> {
    const url = refuseStatic(req.url);
    return withClientSpan(
      req.method,
      url,
      (trace) => send(req, url, trace),
      (r) => r.status,
    );
  }

  async function send(
    req: OutboundRequest,
    url: URL,
    trace: Record<string, string>,
  ): Promise<OutboundResponse> {
    const deadline = startDeadline(req.timeoutMs, req.signal);
    try {
      const pending = undiciRequest(url, {
        dispatcher: agent,
        method: req.method,
        headers: { ...Object.fromEntries(withoutHost(Object.entries(req.headers ?? {}))), ...trace },
        body: req.body ?? null,
        signal: deadline.signal,
        headersTimeout: req.timeoutMs,
        bodyTimeout: req.timeoutMs,
      });
      // An answer that arrives after the deadline won is dropped, connection and all.
      pending.then((late) => {
        if (deadline.expired() || deadline.cancelled()) late.body.destroy();
      }, noop);
      const res = await deadline.race(pending);
      const { body, truncated } = await deadline.race(readCapped(res.body, req.maxResponseBytes));
      return { status: res.statusCode, headers: res.headers, body, truncated };
    } catch (err) {
      if (deadline.cancelled()) throw req.signal!.reason ?? err;
      throw fail(err, deadline.expired());
    } finally {
      deadline.clear();
    }
  }

  async function guardedFetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
    const rawUrl = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const url = refuseStatic(rawUrl);
    // Normalising through the global Request gives one shape for every input form; its URL is the
    // guard's, and any dispatcher or redirect in `init` is ignored here and overridden below.
    const normalised = input instanceof Request ? new Request(input, init) : new Request(url.href, init);
    const body = normalised.body === null ? undefined : Buffer.from(await normalised.arrayBuffer());
    return withClientSpan(
      normalised.method,
      url,
      (trace) => sendFetch(url, normalised, body, trace),
      (r) => r.status,
    );
  }

  async function sendFetch(
    url: URL,
    normalised: Request,
    body: Buffer | undefined,
    trace: Record<string, string>,
  ): Promise<Response> {
    const callerSignal = normalised.signal;
    const deadline = startDeadline(fetchTimeoutMs);
    try {
      const pending = undiciFetch(url.href, {
        method: normalised.method,
        headers: [...withoutHost(normalised.headers.entries()), ...Object.entries(trace)],
        ...(body === undefined ? {} : { body }),
        redirect: 'manual',
        signal: AbortSignal.any([callerSignal, deadline.signal]),
        dispatcher: agent,
      });
      pending.then((late) => {
        if (deadline.expired()) late.body?.cancel().catch(noop);
      }, noop);
      const res = await deadline.race(pending);
      const read = await deadline.race(
        readStreamCapped(res.body as ReadableStream<Uint8Array> | null, fetchCap),
      );
      const headers = new Headers();
      for (const [k, v] of res.headers) headers.append(k, v);
      return new Response(NULL_BODY_STATUS.has(res.status) ? null : read.body, {
        status: res.status,
        statusText: res.statusText,
        headers,
      });
    } catch (err) {
      // The caller's own abort is theirs to handle, in the shape fetch always gives it.
      if (callerSignal.aborted && !deadline.expired()) throw err;
      throw fail(err, deadline.expired());
    } finally {
      deadline.clear();
    }
  }

  // close() waits for calls in flight (each is bounded by its own timeout), then destroys the agent:
  // agent.close() alone would also wait out a connect attempt whose lookup never answers.
  const inFlight = new Set<Promise<unknown>>();
  let closed = false;
  const track = <A extends unknown[], R>(fn: (...args: A) => Promise<R>) => {
    return (...args: A): Promise<R> => {
      if (closed) return Promise.reject(new OutboundError('connection', 'outbound client is closed'));
      const p = fn(...args);
      inFlight.add(p);
      const forget = (): void => void inFlight.delete(p);
      p.then(forget, forget);
      return p;
    };
  };

  return {
    request: track(request),
    fetch: track(guardedFetch),
    async close() {
      closed = true;
      await Promise.allSettled([...inFlight]);
      await agent.destroy();
    },
  };
}
