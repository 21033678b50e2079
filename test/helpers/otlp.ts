/**
 * A real OTLP/HTTP trace receiver for tests: a plain HTTP server on 127.0.0.1 that takes what the
 * service's OTLP exporter sends to `/v1/traces` as OTLP/JSON (OTEL_EXPORTER_OTLP_PROTOCOL=http/json)
 * and keeps every span, flattened.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

type AnyValue = {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: AnyValue[] };
};
interface KeyValue {
  key: string;
  value: AnyValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string | number;
  endTimeUnixNano: string | number;
  attributes?: KeyValue[];
  links?: Array<{ traceId: string; spanId: string; attributes?: KeyValue[] }>;
  events?: Array<{ name: string; attributes?: KeyValue[] }>;
  status?: { code?: number };
}
interface ExportRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: Array<{ scope?: { name?: string }; spans?: OtlpSpan[] }>;
  }>;
}

export interface ExportedSpan {
  traceId: string;
  spanId: string;
  /** absent for a root span */
  parentSpanId?: string;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client */
  kind: number;
  durationMs: number;
  attributes: Record<string, unknown>;
  links: Array<{ traceId: string; spanId: string; attributes: Record<string, unknown> }>;
  events: Array<{ name: string; attributes: Record<string, unknown> }>;
  service: string;
  scope: string;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;

const valueOf = (v: AnyValue): unknown =>
  v.stringValue ??
  (v.intValue !== undefined ? Number(v.intValue) : undefined) ??
  v.doubleValue ??
  v.boolValue ??
  v.arrayValue?.values?.map(valueOf);

const attrs = (kvs: KeyValue[] = []) => Object.fromEntries(kvs.map((kv) => [kv.key, valueOf(kv.value)]));

export interface OtlpReceiver {
  /** the base URL for OTEL_EXPORTER_OTLP_ENDPOINT */
  url: string;
  spans: ExportedSpan[];
  /** the export requests' paths and content types, as they came */
  requests: Array<{ path: string; contentType: string | undefined }>;
  close(): Promise<void>;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ExportedSpan[] = [];
  const requests: OtlpReceiver['requests'] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push({ path: req.url ?? '', contentType: req.headers['content-type'] });
      if (
        req.method !== 'POST' ||
        req.url !== '/v1/traces' ||
        !/json/.test(req.headers['content-type'] ?? '')
      ) {
        res.writeHead(415).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as ExportRequest;
      for (const rs of body.resourceSpans ?? []) {
        const service = String(attrs(rs.resource?.attributes)['service.name'] ?? '');
        for (const ss of rs.scopeSpans ?? [])
          for (const s of ss.spans ?? [])
            spans.push({
              traceId: s.traceId,
              spanId: s.spanId,
              ...(s.parentSpanId ? { parentSpanId: s.parentSpanId } : {}),
              name: s.name,
              kind: s.kind,
              durationMs: (Number(s.endTimeUnixNano) - Number(s.startTimeUnixNano)) / 1e6,
              attributes: attrs(s.attributes),
              links: (s.links ?? []).map((l) => ({
                traceId: l.traceId,
                spanId: l.spanId,
                attributes: attrs(l.attributes),
              })),
              events: (s.events ?? []).map((e) => ({ name: e.name, attributes: attrs(e.attributes) })),
              service,
              scope: ss.scope?.name ?? '',
            });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    requests,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
