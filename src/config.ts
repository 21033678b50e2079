import { z } from 'zod';
import { parseCidrList } from './outbound/guard';

/** Durations are an integer and a unit: 1500ms, 30s, 15m, 24h, 30d. */
const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export function parseDuration(value: string): number {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(value.trim());
  if (!m) throw new Error(`"${value}" is not a duration (an integer and a unit: 1500ms, 30s, 15m, 24h, 30d)`);
  return Number(m[1]) * (UNITS[m[2] as string] as number);
}

const duration = (def: string, min = 1, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .default(def)
    .transform((v, ctx) => {
      try {
        const ms = parseDuration(v);
        if (ms < min || ms > max) {
          ctx.addIssue({ code: 'custom', message: `must be between ${min} ms and ${max} ms, got ${v}` });
          return z.NEVER;
        }
        return ms;
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
        return z.NEVER;
      }
    });

const int = (def: number, min: number, max: number) => z.coerce.number().int().min(min).max(max).default(def);
const port = (def: number) => int(def, 0, 65535);
const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v === '' ? undefined : v));

/** A list setting (empty by default) that `parse` must accept: its error message names what is wrong. */
const parsedList = (parse: (v: string) => unknown) =>
  z
    .string()
    .default('')
    .superRefine((v, ctx) => {
      try {
        parse(v);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
      }
    });

const cidrs = parsedList(parseCidrList);

/**
 * OUTBOUND_HOST_CONCURRENCY_BY_TARGET: `target=n` pairs, comma-separated; a target is a host name or
 * literal address plus port, as the host bound counts it (`hooks.example.com:443`, `[::1]:8443`).
 */
export function parseTargetBounds(v: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const part of v
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean)) {
    const m = /^(\[[0-9a-fA-F:.]+\]|[^\s=:[\]]+):(\d{1,5})=(\d+)$/.exec(part);
    const n = m ? Number(m[3]) : NaN;
    if (!m || Number(m[2]) > 65535 || !Number.isInteger(n) || n < 1 || n > 10_000)
      throw new Error(`"${part}" is not host:port=N (N from 1 to 10000)`);
    out.set(`${m[1]!.toLowerCase()}:${Number(m[2])}`, n);
  }
  return out;
}

const targetBounds = parsedList(parseTargetBounds);

const url = (what: string) =>
  optionalString.superRefine((v, ctx) => {
    if (v === undefined) return;
    try {
      new URL(v);
    } catch {
      ctx.addIssue({ code: 'custom', message: `${what} must be an absolute URL` });
    }
  });

const OTLP_PROTOCOLS = ['grpc', 'http/protobuf', 'http/json'] as const;

/** An OTEL_* value: absent, or one of the spec's words (compared as the SDK compares them). */
const optionalEnum = (values: readonly string[]) =>
  optionalString.superRefine((v, ctx) => {
    if (v !== undefined && !values.includes(v.trim().toLowerCase()))
      ctx.addIssue({ code: 'custom', message: `must be one of ${values.join(', ')}, got ${v}` });
  });

const optionalInt = (min: number, max: number) =>
  optionalString.superRefine((v, ctx) => {
    if (v !== undefined && !(/^\d+$/.test(v.trim()) && Number(v) >= min && Number(v) <= max))
      ctx.addIssue({ code: 'custom', message: `must be an integer between ${min} and ${max}` });
  });

/** `key=value,key=value` (W3C baggage-like, as OTEL_RESOURCE_ATTRIBUTES and OTEL_*_HEADERS are). */
const keyValueList = (what: string) =>
  optionalString.superRefine((v, ctx) => {
    if (v === undefined) return;
    const bad = v.split(',').some((pair) => !/^\s*[^=\s,]+\s*=[^,]*$/.test(pair));
    // The value is not repeated: OTEL_EXPORTER_OTLP_HEADERS may hold a credential.
    if (bad) ctx.addIssue({ code: 'custom', message: `${what} must be key=value pairs separated by commas` });
  });

/** The OTLP endpoint: an http(s) URL (the exporters add /v1/traces to the general one). */
const httpUrl = (what: string) =>
  optionalString.superRefine((v, ctx) => {
    if (v === undefined) return;
    let ok = false;
    try {
      ok = ['http:', 'https:'].includes(new URL(v).protocol);
    } catch {
      ok = false;
    }
    if (!ok) ctx.addIssue({ code: 'custom', message: `${what} must be an absolute http(s) URL` });
  });

export const settingsSchema = z
  .object({
    DATABASE_URL: url('DATABASE_URL'),
    TEMPORAL_ADDRESS: optionalString,
    TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
    TASK_QUEUE: z.string().min(1).default('a2a-push'),
    API_PORT: port(3000),
    INBOX_PORT: port(3001),
    WORKER_PORT: port(3002),
    PUBLIC_BASE_URL: url('PUBLIC_BASE_URL'),
    BOOTSTRAP_API_KEY: optionalString.refine((v) => v === undefined || v.length >= 16, {
      message: 'must be at least 16 characters',
    }),
    SEAL_KEYS: optionalString,
    SEAL_ACTIVE_KEY: optionalString,
    OUTBOUND_ALLOW_CIDRS: cidrs,
    OUTBOUND_DENY_CIDRS: cidrs,
    OUTBOUND_CA_FILE: optionalString,
    // The specification asks senders to time out within 10-30 s; 60 s is the ceiling we accept.
    DELIVERY_TIMEOUT: duration('15s', 1, 60_000),
    DELIVERY_MAX_ATTEMPTS: int(8, 1, 100),
    DELIVERY_DEADLINE: duration('24h'),
    RETRY_INITIAL: duration('30s'),
    RETRY_FACTOR: z.coerce.number().min(1).max(100).default(3),
    RETRY_MAX: duration('6h'),
    OUTBOX_BOUND_PER_CONFIG: int(64, 1, 1_000_000),
    // per_config: a config's pushes go out in event order (a job waits for the earlier ones); none: at once.
    DELIVERY_ORDER: z.enum(['per_config', 'none']).default('per_config'),
    // Calls to one target (host or address, plus port) on the wire at once, across all workers.
    OUTBOUND_HOST_CONCURRENCY: int(8, 1, 10_000),
    // Per-target bounds in place of OUTBOUND_HOST_CONCURRENCY (a known receiver that takes more, or less).
    OUTBOUND_HOST_CONCURRENCY_BY_TARGET: targetBounds,
    // Workflow tasks one worker process runs at once (its capacity; size it to the machine's cores). A
    // run whose local attempt has been on the wire over a second does not count (a receiver that hangs
    // does not stop the worker); past them, work waits in Temporal's task queue, ordered fairly by tenant.
    WORKER_WORKFLOW_TASK_SLOTS: int(10, 2, 500),
    // The main worker's activity slots (per worker process): classic's fast-lane attempts on the wire at
    // once (lean's are local activities: at most 200 per worker, LOCAL_ACTIVITY_SLOTS in src/worker).
    WORKER_ACTIVITY_SLOTS: int(200, 1, 10_000),
    // Activity slots of the slow lane: attempts to targets that recently timed out, refused or were slow.
    SLOW_LANE_CONCURRENCY: int(50, 1, 10_000),
    CONFIG_FAILING_AFTER: duration('5d', 1000),
    // A failing config (jobs ending without a 2xx since its last 2xx) gets one `failing` event in the feed
    // once its failing stretch is this old: a warning before CONFIG_FAILING_AFTER stops it.
    CONFIG_WARN_AFTER: duration('1d', 1000),
    // Configs of one task that are not deleted (active, auth_failed, stopped): each event fans out to them.
    MAX_CONFIGS_PER_TASK: int(100, 1, 100_000),
    SWEEP_INTERVAL: duration('30s', 100),
    INBOX_BOUND_PER_REGISTRATION: int(64, 1, 10_000_000),
    INBOX_BOUND_TOTAL: int(10000, 1, 100_000_000),
    INBOX_TLS_CERT: optionalString,
    INBOX_TLS_KEY: optionalString,
    POLL_INITIAL: duration('30s'),
    POLL_MAX: duration('15m'),
    REGISTRATION_MAX_AGE: duration('30d'),
    RETENTION: duration('30d'),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    // OpenTelemetry (src/tracing.ts): the SDK reads them from the environment; the schema checks them
    // first, so a typo stops the process instead of silently sampling everything or exporting nowhere.
    OTEL_SDK_DISABLED: optionalEnum(['true', 'false']),
    OTEL_SERVICE_NAME: optionalString,
    OTEL_RESOURCE_ATTRIBUTES: keyValueList('OTEL_RESOURCE_ATTRIBUTES'),
    OTEL_TRACES_EXPORTER: optionalEnum(['otlp', 'console', 'none']),
    OTEL_EXPORTER_OTLP_ENDPOINT: httpUrl('OTEL_EXPORTER_OTLP_ENDPOINT'),
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: httpUrl('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'),
    OTEL_EXPORTER_OTLP_PROTOCOL: optionalEnum(OTLP_PROTOCOLS),
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: optionalEnum(OTLP_PROTOCOLS),
    // May carry the collector's credentials: validated, never logged nor shown.
    OTEL_EXPORTER_OTLP_HEADERS: keyValueList('OTEL_EXPORTER_OTLP_HEADERS'),
    OTEL_EXPORTER_OTLP_TRACES_HEADERS: keyValueList('OTEL_EXPORTER_OTLP_TRACES_HEADERS'),
    OTEL_EXPORTER_OTLP_TIMEOUT: optionalInt(1, 600_000),
    OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: optionalInt(1, 600_000),
    OTEL_TRACES_SAMPLER: optionalEnum([
      'always_on',
      'always_off',
      'traceidratio',
      'parentbased_always_on',
      'parentbased_always_off',
      'parentbased_traceidratio',
    ]),
    OTEL_TRACES_SAMPLER_ARG: optionalString.superRefine((v, ctx) => {
      if (v !== undefined && !(/^\d*\.?\d+$/.test(v.trim()) && Number(v) >= 0 && Number(v) <= 1))
        ctx.addIssue({ code: 'custom', message: `must be a ratio between 0 and 1, got ${v}` });
    }),
    OTEL_BSP_SCHEDULE_DELAY: optionalInt(0, 3_600_000),
    OTEL_BSP_EXPORT_TIMEOUT: optionalInt(1, 600_000),
    OTEL_BSP_MAX_QUEUE_SIZE: optionalInt(1, 10_000_000),
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE: optionalInt(1, 10_000_000),
  })
  .superRefine((s, ctx) => {
    if (s.RETRY_INITIAL > s.RETRY_MAX)
      ctx.addIssue({ code: 'custom', path: ['RETRY_INITIAL'], message: 'must not exceed RETRY_MAX' });
    if (s.CONFIG_WARN_AFTER > s.CONFIG_FAILING_AFTER)
      ctx.addIssue({
        code: 'custom',
        path: ['CONFIG_WARN_AFTER'],
        message: 'must not exceed CONFIG_FAILING_AFTER',
      });
    if (s.POLL_INITIAL > s.POLL_MAX)
      ctx.addIssue({ code: 'custom', path: ['POLL_INITIAL'], message: 'must not exceed POLL_MAX' });
    if ((s.INBOX_TLS_CERT === undefined) !== (s.INBOX_TLS_KEY === undefined))
      ctx.addIssue({
        code: 'custom',
        path: [s.INBOX_TLS_CERT === undefined ? 'INBOX_TLS_CERT' : 'INBOX_TLS_KEY'],
        message: 'INBOX_TLS_CERT and INBOX_TLS_KEY go together',
      });
    if (s.SEAL_ACTIVE_KEY !== undefined && s.SEAL_KEYS === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['SEAL_KEYS'],
        message: 'is required when SEAL_ACTIVE_KEY is set',
      });
  });

export type Settings = z.output<typeof settingsSchema>;

/**
 * The main worker's workflow task slots: WORKER_WORKFLOW_TASK_SLOTS in progress (default 10), a run whose
 * local attempt has been on the wire for more than a second not counting, 300 in all (or the setting,
 * if larger; at most maxCachedWorkflows, 500).
 *
 * Why few: a workflow task is a few milliseconds of CPU; more slots only hold more of the server's
 * backlog inside the worker, where it is served first come and shares the worker's CPU, instead of in
 * the task queue, where the tenant fairness key orders it. Benchmark 9 (d), a tenant's burst of 5,000
 * events beside another tenant's stream, on 2 cores: the other tenant's p50 8.2 × its idle p50 with 10
 * slots, 14.9 × with 300; benchmark 1's deliveries/s the same within noise (docs/decisions.md).
 *
 * Why elastic: the fast-lane attempt is a local activity, and a run waiting for one keeps its workflow
 * task slot the whole time: with 10 fixed slots, attempts hanging at one black-holed receiver left the
 * worker no slot to take any other task (a poll needs one). A run whose local attempt has been out for
 * more than a second no longer counts as in progress (src/worker/workflow-slots.ts).
 */
export function workflowTaskSlots(s: Pick<Settings, 'WORKER_WORKFLOW_TASK_SLOTS'>): {
  active: number;
  hardCap: number;
} {
  const active = Number(s.WORKER_WORKFLOW_TASK_SLOTS);
  return { active, hardCap: Math.max(WORKFLOW_TASK_SLOTS_IN_ALL, active) };
}

/** Workflow tasks a worker holds at most, hanging local attempts included. */
export const WORKFLOW_TASK_SLOTS_IN_ALL = 300;

/**
 * Settings of earlier versions that are gone: a process started with one says so once (they tuned how
 * deliveries started; docs/decisions.md, "Starts").
 */
export const REMOVED_SETTINGS = [
  'DELIVERY_WORKFLOW',
  'EAGER_START',
  'EAGER_START_SLOTS',
  'EAGER_START_PER_TENANT',
  'HELD_START_RATE',
  'SLOW_LANE_START_RATE',
] as const;

/** The settings of REMOVED_SETTINGS this environment still sets. */
export const removedSettingsIn = (env: NodeJS.ProcessEnv): string[] =>
  REMOVED_SETTINGS.filter((name) => env[name] !== undefined);

/**
 * The main worker's workflow task pollers (its `simple-maximum`): half its slots in progress, 10 at most,
 * 2 at least. A waiting poll holds a slot, so with as many pollers as slots an idle worker would have no
 * free slot and every eager start would be refused. The SDK gives all of them to the task queue
 * (`nonStickyToStickyPollRatio` 1) and one more to the sticky queue. At least 2: a worker that caches
 * runs (maxCachedWorkflows > 0) refuses to start with fewer (sdk-core), which WORKER_WORKFLOW_TASK_SLOTS
 * 2 or 3 would otherwise give.
 */
export function workflowTaskPollers(active: number): number {
  return Math.min(10, Math.max(2, Math.floor(active / 2)));
}
export const SETTING_NAMES = Object.keys(settingsSchema.shape) as Array<keyof Settings>;

export class SettingsError extends Error {}

/** Parses the environment once; a bad value names the variable. */
export function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const input: Record<string, string | undefined> = {};
  for (const name of SETTING_NAMES) input[name] = env[name];
  const parsed = settingsSchema.safeParse(input);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.') || '(settings)'}: ${i.message}`);
    throw new SettingsError(`invalid settings:\n${lines.join('\n')}`);
  }
  return parsed.data;
}

/** Requires settings that only the embedded start may leave unset. */
export function requireSettings<K extends keyof Settings>(
  s: Settings,
  names: K[],
): Settings & { [P in K]-?: NonNullable<Settings[P]> } {
  const missing = names.filter((n) => s[n] === undefined);
  if (missing.length > 0)
    throw new SettingsError(`missing settings: ${missing.join(', ')} (required outside npm start)`);
  return s as Settings & { [P in K]-?: NonNullable<Settings[P]> };
}
