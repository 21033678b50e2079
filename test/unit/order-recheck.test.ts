import { recheckMs, type LineJob } from '../../src/delivery/order';

const r = { onWireMs: 30_000, idleMs: 300_000 };
const now = 1_000_000;
const job = (seq: number, status: LineJob['status'], extra: Partial<LineJob> = {}): LineJob => ({
  id: `j${seq}`,
  seq: BigInt(seq),
  status,
  openAttempt: false,
  ...extra,
});

describe('recheckMs: how soon a held job asks again when no wake came', () => {
  test('the job ahead is on the wire: 30 s', () => {
    const ahead = job(2, 'in_flight');
    expect(
      recheckMs(ahead, [job(1, 'waiting_retry', { nextAttemptAt: now + 3_600_000 }), ahead], now, r),
    ).toBe(30_000);
    const superseded = job(2, 'superseded', { openAttempt: true });
    expect(recheckMs(superseded, [superseded], now, r)).toBe(30_000);
  });

  test('behind a head waiting for a retry: until its next attempt plus 30 s, at least 5 min', () => {
    const head = job(1, 'waiting_retry', { nextAttemptAt: now + 6 * 3_600_000 });
    const ahead = job(2, 'queued');
    expect(recheckMs(ahead, [ahead, head], now, r)).toBe(6 * 3_600_000 + 30_000);
    const soon = job(1, 'waiting_retry', { nextAttemptAt: now + 10_000 });
    expect(recheckMs(soon, [soon], now, r)).toBe(300_000);
  });

  test('a head whose start was lost (queued, no schedule): 5 min', () => {
    const head = job(1, 'queued');
    expect(recheckMs(head, [head], now, r)).toBe(300_000);
  });
});
