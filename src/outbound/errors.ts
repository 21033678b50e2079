/**
 * What an outbound call's failure is (contract §4): one OutboundError with a closed code, made by
 * classify() from whatever undici, Node's sockets and TLS, or the pinned lookup threw.
 */
import type { GuardRule } from './guard';

export type OutboundErrorCode = 'guard_refused' | 'timeout' | 'connection' | 'dns' | 'tls';

export class OutboundError extends Error {
  readonly code: OutboundErrorCode;
  readonly rule?: GuardRule;
  /** a system or library error code (ECONNREFUSED, CERT_HAS_EXPIRED, ENOTFOUND…); never a secret */
  readonly detail?: string;
  constructor(
    code: OutboundErrorCode,
    message: string,
    opts: { rule?: GuardRule; detail?: string; cause?: unknown } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'OutboundError';
    this.code = code;
    if (opts.rule !== undefined) this.rule = opts.rule;
    if (opts.detail !== undefined) this.detail = opts.detail;
  }
}

// Thrown inside the connect-time lookup. Node hands lookup errors to undici unchanged, and undici
// fails the waiting requests with that same object, so classify() recognises them by class.
export class LookupRefusal extends Error {
  readonly code = 'A2A_GUARD_REFUSED';
  constructor(
    readonly rule: 'denied_cidr' | 'private_address',
    message: string,
  ) {
    super(message);
  }
}

export class LookupFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export class TimeoutReason extends Error {
  constructor(readonly timeoutMs: number) {
    super(`no complete answer within ${timeoutMs} ms`);
  }
}

export function errorCode(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string') {
    return err.code;
  }
  return undefined;
}

/** The error and everything it wraps: `cause` chains (undici fetch) and AggregateError (happy eyeballs). */
function* errorChain(err: unknown, depth = 0): Generator<unknown> {
  if (err === undefined || err === null || depth > 8) return;
  yield err;
  if (err instanceof AggregateError) for (const e of err.errors) yield* errorChain(e, depth + 1);
  if (err instanceof Error && err.cause !== undefined) yield* errorChain(err.cause, depth + 1);
}

const TIMEOUT_CODES = new Set([
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'ETIMEDOUT',
]);
const DNS_CODES = new Set(['ENOTFOUND', 'EAI_AGAIN', 'EAI_FAIL', 'EAI_NODATA', 'EAI_NONAME', 'ENODATA']);
// OpenSSL's X509 verification results as Node names them, plus Node's own TLS codes.
const TLS_CODE =
  /^(ERR_TLS_|ERR_SSL_)|CERT|^UNABLE_TO_|^SELF_SIGNED|^DEPTH_ZERO|^INVALID_(CA|PURPOSE)|^PATH_LENGTH|^EPROTO$/;

export function classify(err: unknown, timedOut: boolean): OutboundError {
  const chain = [...errorChain(err)];
  for (const e of chain) {
    if (e instanceof OutboundError) return e;
    if (e instanceof LookupRefusal) return new OutboundError('guard_refused', e.message, { rule: e.rule });
  }
  const timeout = chain.find((e): e is TimeoutReason => e instanceof TimeoutReason);
  if (timeout || timedOut) {
    return new OutboundError('timeout', timeout?.message ?? 'timed out', { detail: 'timeout', cause: err });
  }
  for (const e of chain) {
    if (e instanceof LookupFailure)
      return new OutboundError('dns', e.message, { detail: e.code, cause: err });
  }
  const codes = chain.map(errorCode).filter((c): c is string => c !== undefined);
  const pick = (test: (c: string) => boolean): string | undefined => codes.find(test);
  const opts = (detail: string | undefined): { detail?: string; cause: unknown } =>
    detail === undefined ? { cause: err } : { detail, cause: err };
  let code: string | undefined;
  if ((code = pick((c) => TIMEOUT_CODES.has(c))))
    return new OutboundError('timeout', 'timed out', opts(code));
  if ((code = pick((c) => TLS_CODE.test(c))))
    return new OutboundError('tls', `TLS failed (${code})`, opts(code));
  if ((code = pick((c) => DNS_CODES.has(c))))
    return new OutboundError('dns', `DNS failed (${code})`, opts(code));
  code = codes.find((c) => c !== 'UND_ERR_SOCKET' && c !== 'UND_ERR_ABORTED') ?? codes[0];
  const name = err instanceof Error ? err.name : typeof err;
  return new OutboundError('connection', `connection failed (${code ?? name})`, opts(code ?? name));
}
