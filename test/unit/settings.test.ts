import {
  loadSettings,
  parseDuration,
  parseTargetBounds,
  SETTING_NAMES,
  workflowTaskPollers,
  removedSettingsIn,
  workflowTaskSlots,
} from '../../src/config';
import { hostAndTarget, targetOf } from '../../src/db/slots';
import { createRuntime } from '../../src/runtime';
import { Keyring } from '../../src/sealing/keyring';
import { OTEL_SETTING_NAMES, tracingRequested } from '../../src/tracing';

describe('settings', () => {
  it('has the contract defaults', () => {
    const s = loadSettings({});
    expect(s).toMatchObject({
      TEMPORAL_NAMESPACE: 'default',
      TASK_QUEUE: 'a2a-push',
      API_PORT: 3000,
      INBOX_PORT: 3001,
      WORKER_PORT: 3002,
      DELIVERY_TIMEOUT: 15_000,
      DELIVERY_MAX_ATTEMPTS: 8,
      DELIVERY_DEADLINE: 86_400_000,
      RETRY_INITIAL: 30_000,
      RETRY_FACTOR: 3,
      RETRY_MAX: 21_600_000,
      OUTBOX_BOUND_PER_CONFIG: 64,
      MAX_CONFIGS_PER_TASK: 100,
      SWEEP_INTERVAL: 30_000,
      INBOX_BOUND_PER_REGISTRATION: 64,
      INBOX_BOUND_TOTAL: 10_000,
      POLL_INITIAL: 30_000,
      POLL_MAX: 900_000,
      REGISTRATION_MAX_AGE: 30 * 86_400_000,
      RETENTION: 30 * 86_400_000,
      LOG_LEVEL: 'info',
    });
  });
  it("polls with half the worker's workflow task slots in progress, at least 2 and at most 10", () => {
    expect(workflowTaskPollers(10)).toBe(5);
    // sdk-core refuses a caching worker with fewer than 2 pollers: 2 and 3 slots get 2.
    expect(workflowTaskPollers(2)).toBe(2);
    expect(workflowTaskPollers(3)).toBe(2);
    expect(workflowTaskPollers(40)).toBe(10);
  });

  it("sizes the worker's workflow task slots: WORKER_WORKFLOW_TASK_SLOTS in progress, 300 in all (or more)", () => {
    // 10 in progress, a run whose local attempt hangs not counting, 300 in all.
    expect(workflowTaskSlots(loadSettings({}))).toEqual({ active: 10, hardCap: 300 });
    expect(workflowTaskSlots(loadSettings({ WORKER_WORKFLOW_TASK_SLOTS: '40' }))).toEqual({
      active: 40,
      hardCap: 300,
    });
    expect(workflowTaskSlots(loadSettings({ WORKER_WORKFLOW_TASK_SLOTS: '400' }))).toEqual({
      active: 400,
      hardCap: 400,
    });
    expect(loadSettings({}).WORKER_ACTIVITY_SLOTS).toBe(200);
    expect(() => loadSettings({ WORKER_WORKFLOW_TASK_SLOTS: '1' })).toThrow(/WORKER_WORKFLOW_TASK_SLOTS/);
    expect(() => loadSettings({ WORKER_WORKFLOW_TASK_SLOTS: '501' })).toThrow(/WORKER_WORKFLOW_TASK_SLOTS/);
  });

  it('a setting of an earlier version that is gone is no error: the start names it in a warning', () => {
    const env = { HELD_START_RATE: '10', EAGER_START: 'off', OUTBOUND_HOST_CONCURRENCY: '4' };
    expect(() => loadSettings(env)).not.toThrow();
    expect(removedSettingsIn(env)).toEqual(['EAGER_START', 'HELD_START_RATE']);
    expect(removedSettingsIn({})).toEqual([]);
  });

  it('outside npm start, SEAL_ACTIVE_KEY is required: never taken to be the last key of SEAL_KEYS', async () => {
    const keys = `${Keyring.generateEntry('k1')},${Keyring.generateEntry('k2')}`;
    const base = { DATABASE_URL: 'postgres://u@127.0.0.1:9/x', SEAL_KEYS: keys, LOG_LEVEL: 'silent' };
    expect(() => createRuntime(loadSettings(base), 'test')).toThrow(
      'missing settings: SEAL_ACTIVE_KEY (required outside npm start)',
    );
    // Named, it seals with that key, even when a later one is listed.
    const rt = createRuntime(loadSettings({ ...base, SEAL_ACTIVE_KEY: 'k1' }), 'test');
    try {
      expect(rt.keyring.activeKeyId).toBe('k1');
    } finally {
      await rt.db.end();
    }
    expect(() => createRuntime(loadSettings({ ...base, SEAL_ACTIVE_KEY: 'k3' }), 'test')).toThrow(
      'SEAL_ACTIVE_KEY "k3" is not in SEAL_KEYS',
    );
  });

  it('parses every duration unit', () => {
    expect(['1500ms', '30s', '15m', '24h', '30d'].map(parseDuration)).toEqual([
      1500, 30_000, 900_000, 86_400_000, 2_592_000_000,
    ]);
  });
  it.each([
    ['DELIVERY_TIMEOUT', 'fast'],
    ['DELIVERY_TIMEOUT', '15'],
    ['DELIVERY_MAX_ATTEMPTS', '0'],
    ['DELIVERY_MAX_ATTEMPTS', 'eight'],
    ['MAX_CONFIGS_PER_TASK', '0'],
    ['API_PORT', '70000'],
    ['LOG_LEVEL', 'loud'],
    ['OUTBOUND_ALLOW_CIDRS', '10.0.0.0/33'],
    ['OUTBOUND_DENY_CIDRS', 'nonsense'],
    ['DATABASE_URL', 'not a url'],
    ['OTEL_TRACES_SAMPLER', 'parentbased_always'],
    ['OTEL_TRACES_SAMPLER_ARG', '1.5'],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'collector:4318'],
    ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'ftp://collector/v1/traces'],
    ['OTEL_EXPORTER_OTLP_PROTOCOL', 'http'],
    ['OTEL_TRACES_EXPORTER', 'jaeger'],
    ['OTEL_SDK_DISABLED', 'yes'],
    ['OTEL_BSP_SCHEDULE_DELAY', '5s'],
    ['OTEL_RESOURCE_ATTRIBUTES', 'deployment.environment'],
  ])('a bad %s stops the start with a message naming it', (name, value) => {
    expect(() => loadSettings({ [name]: value })).toThrow(name);
  });
  it('cross-checks RETRY_INITIAL ≤ RETRY_MAX and POLL_INITIAL ≤ POLL_MAX', () => {
    expect(() => loadSettings({ RETRY_INITIAL: '2h', RETRY_MAX: '1h' })).toThrow('RETRY_INITIAL');
    expect(() => loadSettings({ POLL_INITIAL: '1h', POLL_MAX: '1m' })).toThrow('POLL_INITIAL');
  });
  it('takes the standard OTEL_* values, and never repeats a bad OTEL_EXPORTER_OTLP_HEADERS (it may hold a credential)', () => {
    const s = loadSettings({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_SERVICE_NAME: 'a2a-push-api',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod,service.namespace=nr',
      OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer abc',
    });
    expect(s.OTEL_TRACES_SAMPLER).toBe('parentbased_traceidratio');
    expect(() => loadSettings({ OTEL_EXPORTER_OTLP_HEADERS: 'secret-header-value' })).toThrow(
      /OTEL_EXPORTER_OTLP_HEADERS: .*key=value/,
    );
    expect(() => loadSettings({ OTEL_EXPORTER_OTLP_HEADERS: 'secret-header-value' })).not.toThrow(
      'secret-header-value',
    );
  });
  it('turns tracing on with any OTEL_* setting, off with none, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none', () => {
    expect(tracingRequested({})).toBe(false);
    expect(tracingRequested({ OTEL_SERVICE_NAME: 'x' })).toBe(true);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toBe(true);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' })).toBe(false);
    expect(tracingRequested({ OTEL_SERVICE_NAME: 'x', OTEL_SDK_DISABLED: 'TRUE' })).toBe(false);
    expect(tracingRequested({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_EXPORTER: 'none' })).toBe(false);
    // Every name that turns it on is one the schema checks.
    for (const n of OTEL_SETTING_NAMES) expect(SETTING_NAMES).toContain(n);
  });
});

describe('OUTBOUND_HOST_CONCURRENCY_BY_TARGET', () => {
  it('reads target=N pairs, host names lowercased, IPv6 in brackets, ports as numbers', () => {
    expect(parseTargetBounds(' Hooks.Example.com:443=64, [::1]:08443=2 ,,10.0.0.5:80=1')).toEqual(
      new Map([
        ['hooks.example.com:443', 64],
        ['[::1]:8443', 2],
        ['10.0.0.5:80', 1],
      ]),
    );
    expect(parseTargetBounds('')).toEqual(new Map());
  });
  it.each([
    'hooks.example.com=4',
    'hooks.example.com:443',
    'hooks.example.com:443=0',
    'a:70000=2',
    'a:1=10001',
    'a b:1=2',
  ])('refuses %j, naming the setting', (v) => {
    expect(() => parseTargetBounds(v)).toThrow('host:port=N');
    expect(() => loadSettings({ OUTBOUND_HOST_CONCURRENCY_BY_TARGET: v })).toThrow(
      'OUTBOUND_HOST_CONCURRENCY_BY_TARGET',
    );
  });
  it('matches what the host bound counts as a target', () => {
    const bounds = parseTargetBounds('hooks.example.com:443=64,[::1]:8443=2');
    expect(bounds.get(targetOf('https://HOOKS.example.com/a2a'))).toBe(64);
    expect(bounds.get(targetOf('https://[::1]:8443/x'))).toBe(2);
  });
  it("a job's start parses its URL once: the summary's host and the same target", () => {
    expect(hostAndTarget('https://HOOKS.example.com/a2a?x=1')).toEqual({
      host: 'hooks.example.com',
      target: 'hooks.example.com:443',
    });
    expect(hostAndTarget('https://u:p@[::1]:8443/x')).toEqual({ host: '[::1]:8443', target: '[::1]:8443' });
    expect(hostAndTarget('http://127.0.0.1/x')).toEqual({ host: '127.0.0.1', target: '127.0.0.1:80' });
    for (const url of ['https://hooks.example.com/a', 'https://[::1]:8443/x'])
      expect(hostAndTarget(url).target).toBe(targetOf(url));
    expect(hostAndTarget('not a url')).toEqual({ host: '?' });
  });
});
