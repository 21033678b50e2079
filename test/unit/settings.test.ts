import { loadSettings, parseDuration } from '../../src/config';

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
  ])('a bad %s stops the start with a message naming it', (name, value) => {
    expect(() => loadSettings({ [name]: value })).toThrow(name);
  });
  it('cross-checks RETRY_INITIAL ≤ RETRY_MAX and POLL_INITIAL ≤ POLL_MAX', () => {
    expect(() => loadSettings({ RETRY_INITIAL: '2h', RETRY_MAX: '1h' })).toThrow('RETRY_INITIAL');
    expect(() => loadSettings({ POLL_INITIAL: '1h', POLL_MAX: '1m' })).toThrow('POLL_INITIAL');
  });
});
