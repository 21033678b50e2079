/**
 * OpenTelemetry traces, exported over OTLP when the standard `OTEL_*` variables ask for it.
 *
 * The one module that loads OpenTelemetry's SDK and Temporal's OpenTelemetry interceptors, only in
 * `startTracing` and only when an `OTEL_*` setting is given (test/integration/tracing-lazy.test.ts).
 * Every other module calls its functions, no-ops while tracing is off, and imports OTel's types only.
 * The trace of one event: the API request (its parent is nr-llm's `traceparent`, when sent) → the
 * event write → the dispatcher's start (direct, or a claim or sweep later: the request's trace context
 * is kept on the job row as the request id is) → Temporal's StartWorkflow → RunWorkflow → each
 * attempt's StartActivity and RunActivity → the POST, which carries `traceparent` to the receiver.
 * An inbox callback starts a trace of its own: the agent's `traceparent` is untrusted and only linked.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type * as OtelApi from '@opentelemetry/api';
import type { NodeSDK } from '@opentelemetry/sdk-node';
import type { Resource } from '@opentelemetry/resources';
import type { SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { WorkflowClientInterceptor } from '@temporalio/client';
import type { ActivityInterceptorsFactory, InjectedSinks } from '@temporalio/worker';

/**
 * The OpenTelemetry settings the service knows (validated by the settings schema, src/config.ts, and
 * read by the SDK from the environment). Any one of them set turns tracing on, unless
 * `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turns it off.
 */
export const OTEL_SETTING_NAMES = [
  'OTEL_SDK_DISABLED',
  'OTEL_SERVICE_NAME',
  'OTEL_RESOURCE_ATTRIBUTES',
  'OTEL_TRACES_EXPORTER',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_EXPORTER_OTLP_PROTOCOL',
  'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
  'OTEL_EXPORTER_OTLP_HEADERS',
  'OTEL_EXPORTER_OTLP_TRACES_HEADERS',
  'OTEL_EXPORTER_OTLP_TIMEOUT',
  'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT',
  'OTEL_TRACES_SAMPLER',
  'OTEL_TRACES_SAMPLER_ARG',
  'OTEL_BSP_SCHEDULE_DELAY',
  'OTEL_BSP_EXPORT_TIMEOUT',
  'OTEL_BSP_MAX_QUEUE_SIZE',
  'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
] as const;

export function tracingRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  const set = (n: string) => (env[n] ?? '').trim() !== '';
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return false;
  if ((env.OTEL_TRACES_EXPORTER ?? '').trim().toLowerCase() === 'none') return false;
  return OTEL_SETTING_NAMES.some(set);
}

interface Active {
  api: typeof OtelApi;
  tracer: OtelApi.Tracer;
  sdk: NodeSDK;
  processor: SpanProcessor;
  resource: Resource;
  temporal: typeof import('@temporalio/interceptors-opentelemetry');
}
let active: Active | undefined;

export const tracingActive = (): boolean => active !== undefined;

function spanExporter(env: NodeJS.ProcessEnv): SpanExporter {
  if ((env.OTEL_TRACES_EXPORTER ?? '').trim().toLowerCase() === 'console') {
    const { ConsoleSpanExporter } =
      require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
    return new ConsoleSpanExporter();
  }
  const protocol = (
    env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ||
    env.OTEL_EXPORTER_OTLP_PROTOCOL ||
    'http/protobuf'
  ).trim();
  // Each exporter reads its endpoint, headers and timeout from the same variables.
  if (protocol === 'http/json') {
    const { OTLPTraceExporter } =
      require('@opentelemetry/exporter-trace-otlp-http') as typeof import('@opentelemetry/exporter-trace-otlp-http');
    return new OTLPTraceExporter();
  }
  if (protocol === 'grpc') {
    const { OTLPTraceExporter } =
      require('@opentelemetry/exporter-trace-otlp-grpc') as typeof import('@opentelemetry/exporter-trace-otlp-grpc');
    return new OTLPTraceExporter();
  }
  const { OTLPTraceExporter } =
    require('@opentelemetry/exporter-trace-otlp-proto') as typeof import('@opentelemetry/exporter-trace-otlp-proto');
  return new OTLPTraceExporter();
}

/**
 * Starts the SDK when the environment asks for tracing (see tracingRequested); returns whether it is
 * on. `serviceName` names the process when OTEL_SERVICE_NAME does not. Call it once, before the
 * Temporal clients and the worker are made. The SDK reads its settings from process.env, and so does this.
 */
export function startTracing(serviceName: string): boolean {
  const env = process.env;
  if (active) return true;
  if (!tracingRequested(env)) return false;
  const api = require('@opentelemetry/api') as typeof OtelApi;
  const { NodeSDK } = require('@opentelemetry/sdk-node') as typeof import('@opentelemetry/sdk-node');
  const { BatchSpanProcessor } =
    require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
  const { W3CTraceContextPropagator } =
    require('@opentelemetry/core') as typeof import('@opentelemetry/core');
  const resources = require('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  // One resource for the process's own spans and for the workflow spans the worker exports for its
  // workflow sandbox: the SDK's defaults, then the service name, then OTEL_RESOURCE_ATTRIBUTES and
  // OTEL_SERVICE_NAME, which win.
  const resource = resources.Resource.default()
    .merge(new resources.Resource({ 'service.name': serviceName }))
    .merge(resources.envDetectorSync.detect());
  // The BatchSpanProcessor takes its delay and sizes from OTEL_BSP_*.
  const processor = new BatchSpanProcessor(spanExporter(env));
  const sdk = new NodeSDK({
    resource,
    autoDetectResources: false,
    spanProcessors: [processor],
    // W3C trace context only: no baggage is taken in or passed on.
    textMapPropagator: new W3CTraceContextPropagator(),
    // Traces only: the service's metrics are Prometheus, its logs pino.
    logRecordProcessors: [],
    instrumentations: [],
  });
  sdk.start();
  active = {
    api,
    tracer: api.trace.getTracer('a2a-push'),
    sdk,
    processor,
    resource,
    temporal:
      require('@temporalio/interceptors-opentelemetry') as typeof import('@temporalio/interceptors-opentelemetry'),
  };
  return true;
}

/** Exports what is buffered (tests, and before a process exits). */
export async function flushTracing(): Promise<void> {
  await active?.processor.forceFlush();
}

/** Flushes and stops the SDK; tracing is off afterwards. */
export async function shutdownTracing(): Promise<void> {
  const a = active;
  if (!a) return;
  active = undefined;
  await a.sdk.shutdown().catch(() => undefined);
  a.api.trace.disable();
  a.api.context.disable();
  a.api.propagation.disable();
}

// ---- W3C traceparent ----

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** A span context from a `traceparent` value, or undefined when it is not a valid one. */
function parseTraceparent(a: Active, value: string | null | undefined): OtelApi.SpanContext | undefined {
  if (typeof value !== 'string') return undefined;
  const m = TRACEPARENT.exec(value.trim());
  if (!m) return undefined;
  const [, version, traceId, spanId, flags, rest] = m as unknown as string[];
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  const ctx = { traceId: traceId!, spanId: spanId!, traceFlags: parseInt(flags!, 16) & 1, isRemote: true };
  return a.api.isSpanContextValid(ctx) ? ctx : undefined;
}

const formatTraceparent = (c: OtelApi.SpanContext) =>
  `00-${c.traceId}-${c.spanId}-0${(c.traceFlags & 1).toString(16)}`;

function activeSpanContext(a: Active): OtelApi.SpanContext | undefined {
  const c = a.api.trace.getSpanContext(a.api.context.active());
  return c && a.api.isSpanContextValid(c) ? c : undefined;
}

/** The current span as a `traceparent` value (stored on a job row to start its workflow later). */
export function currentTraceparent(): string | undefined {
  const c = active && activeSpanContext(active);
  return c ? formatTraceparent(c) : undefined;
}

/** Trace and span id for a log line written inside a span (the logger's mixin); {} otherwise. */
export function traceLogFields(): { traceId?: string; spanId?: string } {
  const c = active && activeSpanContext(active);
  return c ? { traceId: c.traceId, spanId: c.spanId } : {};
}

// ---- spans ----

export type Attributes = Record<string, string | number | boolean | undefined>;

export interface SpanOptions {
  attributes?: Attributes;
  /**
   * A stored `traceparent` to be the parent (a dispatcher claim starting a job written earlier); null
   * starts a new trace; absent: the current span is the parent.
   */
  parent?: string | null;
  /** `traceparent` values to link (callbacks a reconcile covers); invalid ones are dropped. */
  links?: Array<string | null | undefined>;
}

const clean = (attrs: Attributes = {}): OtelApi.Attributes =>
  Object.fromEntries(Object.entries(attrs).filter(([, v]) => v !== undefined)) as OtelApi.Attributes;

function parentContext(a: Active, parent: string | null | undefined): OtelApi.Context {
  if (parent === undefined) return a.api.context.active();
  const c = parseTraceparent(a, parent);
  return c ? a.api.trace.setSpanContext(a.api.ROOT_CONTEXT, c) : a.api.ROOT_CONTEXT;
}

const linksOf = (a: Active, values: SpanOptions['links']): OtelApi.Link[] =>
  (values ?? []).flatMap((v) => {
    const context = parseTraceparent(a, v);
    return context ? [{ context }] : [];
  });

/** Runs `fn` in an internal span named `name` (just runs it while tracing is off). */
export async function inSpan<T>(
  name: string,
  o: SpanOptions,
  fn: (setAttributes: (attrs: Attributes) => void) => Promise<T>,
): Promise<T> {
  const a = active;
  if (!a) return fn(() => undefined);
  const span = a.tracer.startSpan(
    name,
    {
      kind: a.api.SpanKind.INTERNAL,
      attributes: clean(o.attributes),
      links: linksOf(a, o.links),
      ...(o.parent === null ? { root: true } : {}),
    },
    parentContext(a, o.parent),
  );
  try {
    return await a.api.context.with(a.api.trace.setSpan(a.api.context.active(), span), () =>
      fn((attrs) => span.setAttributes(clean(attrs))),
    );
  } catch (err) {
    span.setStatus({ code: a.api.SpanStatusCode.ERROR });
    span.setAttribute('error.type', errorType(err));
    throw err;
  } finally {
    span.end();
  }
}

const errorType = (err: unknown): string =>
  (err as { code?: unknown })?.code !== undefined
    ? String((err as { code: unknown }).code)
    : err instanceof Error
      ? err.constructor.name
      : 'error';

/** Ops routes are scraped and probed all day: no trace for them. */
const UNTRACED = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * How a listener treats an incoming `traceparent`: the API's caller (nr-llm) is trusted, so it is the
 * parent; a remote agent's callback is not, so it only becomes a link of a new trace, and its sampled
 * flag decides nothing.
 */
export type IncomingTrace = 'parent' | 'link';

/**
 * Runs a request's handling in an HTTP server span (OpenTelemetry's HTTP conventions, without the URL's
 * path or query: the route template names the span). `route` is read when the answer is sent.
 */
export function runServerSpan(
  req: IncomingMessage & { route?: { path?: unknown }; baseUrl?: string },
  res: ServerResponse,
  incoming: IncomingTrace,
  next: () => void,
): void {
  const a = active;
  if (!a) return next();
  const path = (req.url ?? '').split('?')[0] ?? '';
  if (UNTRACED.has(path)) return next();
  const method = req.method ?? 'GET';
  const traceparent = req.headers.traceparent;
  const parent =
    incoming === 'parent' ? a.api.propagation.extract(a.api.ROOT_CONTEXT, req.headers) : a.api.ROOT_CONTEXT;
  const link =
    incoming === 'link'
      ? parseTraceparent(a, typeof traceparent === 'string' ? traceparent : undefined)
      : undefined;
  const secure = (req.socket as { encrypted?: boolean }).encrypted === true;
  const span = a.tracer.startSpan(
    method,
    {
      kind: a.api.SpanKind.SERVER,
      ...(incoming === 'link' ? { root: true } : {}),
      links: link ? [{ context: link, attributes: { 'a2a_push.link': 'caller_traceparent' } }] : [],
      attributes: {
        'http.request.method': method,
        'url.scheme': secure ? 'https' : 'http',
        'network.protocol.version': req.httpVersion,
        ...(req.socket.localPort !== undefined ? { 'server.port': req.socket.localPort } : {}),
      },
    },
    parent,
  );
  const done = () => {
    res.removeListener('finish', done);
    res.removeListener('close', done);
    const route = typeof req.route?.path === 'string' ? `${req.baseUrl ?? ''}${req.route.path}` : undefined;
    if (route) {
      span.updateName(`${method} ${route}`);
      span.setAttribute('http.route', route);
    }
    span.setAttribute('http.response.status_code', res.statusCode);
    if (res.statusCode >= 500) {
      span.setStatus({ code: a.api.SpanStatusCode.ERROR });
      span.setAttribute('error.type', String(res.statusCode));
    } else if (!res.writableFinished) span.setAttribute('error.type', 'aborted');
    span.end();
  };
  res.on('finish', done);
  res.on('close', done);
  a.api.context.with(a.api.trace.setSpan(parent, span), next);
}

/**
 * Runs one outbound HTTP call in a client span and hands `call` the headers to send: `traceparent`
 * only (never `tracestate`, which is nr-llm's and not for third parties). The span records the URL's
 * scheme, host and port and never its path or query (webhook paths and queries often carry tokens).
 */
export async function withClientSpan<T>(
  method: string,
  url: URL,
  call: (traceHeaders: Record<string, string>) => Promise<T>,
  statusOf: (r: T) => number,
): Promise<T> {
  const a = active;
  if (!a) return call({});
  const scheme = url.protocol.replace(/:$/, '');
  const port = url.port ? Number(url.port) : scheme === 'https' ? 443 : 80;
  const span = a.tracer.startSpan(method, {
    kind: a.api.SpanKind.CLIENT,
    attributes: {
      'http.request.method': method,
      'url.scheme': scheme,
      'server.address': url.hostname.replace(/^\[|\]$/g, ''),
      'server.port': port,
    },
  });
  const c = span.spanContext();
  try {
    const r = await a.api.context.with(a.api.trace.setSpan(a.api.context.active(), span), () =>
      call(a.api.isSpanContextValid(c) ? { traceparent: formatTraceparent(c) } : {}),
    );
    const status = statusOf(r);
    span.setAttribute('http.response.status_code', status);
    if (status >= 400) {
      span.setStatus({ code: a.api.SpanStatusCode.ERROR });
      span.setAttribute('error.type', String(status));
    }
    return r;
  } catch (err) {
    span.setStatus({ code: a.api.SpanStatusCode.ERROR });
    span.setAttribute('error.type', errorType(err));
    throw err;
  } finally {
    span.end();
  }
}

// ---- Temporal ----

/** Temporal's client interceptor (StartWorkflow, SignalWithStartWorkflow spans; context in headers). */
export function temporalClientInterceptors(): WorkflowClientInterceptor[] {
  return active ? [new active.temporal.OpenTelemetryWorkflowClientInterceptor()] : [];
}

/**
 * What a worker adds while tracing is on: Temporal's workflow interceptors (bundled into the workflow
 * code), the sink that exports the workflow sandbox's spans, and the activity interceptors (RunActivity
 * spans; first, so every other interceptor and the activity run inside the span).
 */
export function temporalWorkerTracing():
  | { workflowModules: string[]; activity: ActivityInterceptorsFactory[]; sinks: InjectedSinks<never> }
  | undefined {
  const a = active;
  if (!a) return undefined;
  const t = a.temporal;
  return {
    workflowModules: [require.resolve('@temporalio/interceptors-opentelemetry/lib/workflow-interceptors')],
    activity: [
      (ctx) => ({
        inbound: new t.OpenTelemetryActivityInboundInterceptor(ctx),
        outbound: new t.OpenTelemetryActivityOutboundInterceptor(ctx),
      }),
    ],
    sinks: { exporter: t.makeWorkflowExporter(a.processor, a.resource) } as unknown as InjectedSinks<never>,
  };
}
