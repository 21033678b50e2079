import { classifyAttempt, parseRetryAfter, type AttemptResult } from '../../src/delivery/classify';

const NOW = Date.parse('2026-12-02T12:00:00Z');

describe('classifyAttempt: the outcome table of contract section 3', () => {
  const table: Array<[string, AttemptResult, Partial<ReturnType<typeof classifyAttempt>>]> = [
    [
      '200 acks',
      { kind: 'response', status: 200 },
      { outcome: 'delivered', jobStatus: 'delivered', reason: 'http_200' },
    ],
    ['204 acks', { kind: 'response', status: 204 }, { outcome: 'delivered', jobStatus: 'delivered' }],
    ['299 acks', { kind: 'response', status: 299 }, { outcome: 'delivered', jobStatus: 'delivered' }],
    [
      '429 retries',
      { kind: 'response', status: 429 },
      { outcome: 'retry', reason: 'http_429', jobStatus: undefined },
    ],
    ['502 retries', { kind: 'response', status: 502 }, { outcome: 'retry', reason: 'http_502' }],
    ['503 retries', { kind: 'response', status: 503 }, { outcome: 'retry', reason: 'http_503' }],
    ['504 retries', { kind: 'response', status: 504 }, { outcome: 'retry', reason: 'http_504' }],
    ['timeout retries', { kind: 'error', code: 'timeout' }, { outcome: 'retry', reason: 'timeout' }],
    [
      'connection refused retries',
      { kind: 'error', code: 'connection' },
      { outcome: 'retry', reason: 'connection' },
    ],
    ['name resolution failure retries', { kind: 'error', code: 'dns' }, { outcome: 'retry', reason: 'dns' }],
    [
      '401 pauses the config',
      { kind: 'response', status: 401 },
      { outcome: 'auth_failed', jobStatus: 'auth_failed', configStatus: 'auth_failed', reason: 'http_401' },
    ],
    [
      '403 pauses the config',
      { kind: 'response', status: 403 },
      { outcome: 'auth_failed', jobStatus: 'auth_failed', configStatus: 'auth_failed', reason: 'http_403' },
    ],
    [
      '404 stops the config',
      { kind: 'response', status: 404 },
      { outcome: 'stopped', jobStatus: 'stopped', configStatus: 'stopped', reason: 'http_404' },
    ],
    [
      '410 stops the config',
      { kind: 'response', status: 410 },
      { outcome: 'stopped', jobStatus: 'stopped', configStatus: 'stopped', reason: 'http_410' },
    ],
    [
      'guard refusal stops the config',
      { kind: 'guard_refused', rule: 'private_address' },
      {
        outcome: 'guard_refused',
        jobStatus: 'stopped',
        configStatus: 'stopped',
        reason: 'guard_refused:private_address',
      },
    ],
    [
      '301 is a failed attempt',
      { kind: 'response', status: 301 },
      { outcome: 'failed', jobStatus: 'failed', reason: 'redirect' },
    ],
    [
      '302 is a failed attempt',
      { kind: 'response', status: 302 },
      { outcome: 'failed', jobStatus: 'failed', reason: 'redirect' },
    ],
    [
      '307 is a failed attempt',
      { kind: 'response', status: 307 },
      { outcome: 'failed', jobStatus: 'failed', reason: 'redirect' },
    ],
    [
      '500 fails',
      { kind: 'response', status: 500 },
      { outcome: 'failed', jobStatus: 'failed', reason: 'http_500' },
    ],
    [
      '400 fails',
      { kind: 'response', status: 400 },
      { outcome: 'failed', jobStatus: 'failed', reason: 'http_400' },
    ],
    [
      '418 fails',
      { kind: 'response', status: 418 },
      { outcome: 'failed', jobStatus: 'failed', reason: 'http_418' },
    ],
    [
      '501 fails',
      { kind: 'response', status: 501 },
      { outcome: 'failed', jobStatus: 'failed', reason: 'http_501' },
    ],
    [
      'a 1xx that reached us fails',
      { kind: 'response', status: 101 },
      { outcome: 'failed', jobStatus: 'failed' },
    ],
    [
      'a TLS error fails',
      { kind: 'error', code: 'tls' },
      { outcome: 'failed', jobStatus: 'failed', reason: 'tls' },
    ],
  ];
  it.each(table)('%s', (_name, input, expected) => {
    const c = classifyAttempt(input, NOW);
    for (const [k, v] of Object.entries(expected)) expect(c[k as keyof typeof c]).toEqual(v);
    if (!('configStatus' in expected)) expect(c.configStatus).toBeUndefined();
  });

  it('429 and 503 carry Retry-After in seconds', () => {
    expect(classifyAttempt({ kind: 'response', status: 429, retryAfter: '120' }, NOW).retryAfterMs).toBe(
      120_000,
    );
    expect(classifyAttempt({ kind: 'response', status: 503, retryAfter: '7' }, NOW).retryAfterMs).toBe(7_000);
  });
  it('Retry-After on 502 and 504 is ignored', () => {
    expect(
      classifyAttempt({ kind: 'response', status: 502, retryAfter: '120' }, NOW).retryAfterMs,
    ).toBeUndefined();
    expect(
      classifyAttempt({ kind: 'response', status: 504, retryAfter: '120' }, NOW).retryAfterMs,
    ).toBeUndefined();
  });
  it('Retry-After as an HTTP date counts from now, never negative', () => {
    expect(parseRetryAfter('Wed, 02 Dec 2026 12:01:30 GMT', NOW)).toBe(90_000);
    expect(parseRetryAfter('Wed, 02 Dec 2026 11:00:00 GMT', NOW)).toBe(0);
  });
  it('a malformed Retry-After is ignored', () => {
    for (const v of ['', 'soon', '-5', '1.5', '12abc']) expect(parseRetryAfter(v, NOW)).toBeUndefined();
  });
});
