import { AsyncLocalStorage } from 'node:async_hooks';
import { defaultPayloadConverter, type Headers } from '@temporalio/common';
import type { WorkflowClientInterceptor } from '@temporalio/client';
import type { Logger } from 'pino';

/**
 * One request id per API or inbox request, carried as a Temporal header into the workflows it starts
 * or signals, from there into their activities, and so into every log line on the way.
 */
export const REQUEST_ID_HEADER = 'a2a-push-request-id';

interface RequestContext {
  requestId: string;
  logger?: Logger;
}
const storage = new AsyncLocalStorage<RequestContext>();

export const withRequestContext = <T>(ctx: RequestContext, fn: () => T): T => storage.run(ctx, fn);
export const currentRequestId = (): string | undefined => storage.getStore()?.requestId || undefined;

/** The logger of the current request or activity (with its request id), else the given one. */
export const contextLogger = (fallback: Logger): Logger => storage.getStore()?.logger ?? fallback;

export function readRequestId(headers: Headers): string | undefined {
  const p = headers[REQUEST_ID_HEADER];
  if (!p) return undefined;
  const v: unknown = defaultPayloadConverter.fromPayload(p);
  return typeof v === 'string' ? v : undefined;
}

const withHeader = (headers: Headers): Headers => {
  const id = currentRequestId();
  return id && !headers[REQUEST_ID_HEADER]
    ? { ...headers, [REQUEST_ID_HEADER]: defaultPayloadConverter.toPayload(id) }
    : headers;
};

/** Client side: workflow starts and signals made inside a request carry its id. */
export const requestIdClientInterceptor: WorkflowClientInterceptor = {
  start: (input, next) => next({ ...input, headers: withHeader(input.headers) }),
  startWithDetails: (input, next) => next({ ...input, headers: withHeader(input.headers) }),
  signalWithStart: (input, next) => next({ ...input, headers: withHeader(input.headers) }),
  signal: (input, next) => next({ ...input, headers: withHeader(input.headers) }),
};
