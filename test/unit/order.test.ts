/**
 * The line's rule (src/delivery/order.ts: heldBy): a job may make its first attempt only when no earlier
 * job of its config holds the line (unfinished, or ended with an attempt on the wire). The SQL that
 * keeps lines (migration 020) is checked against it by test/integration/line.property.test.ts.
 */
import type { JobStatus } from '../../src/delivery/types';
import { heldBy, holdsLine, type LineJob } from '../../src/delivery/order';

const job = (seq: number, status: JobStatus, openAttempt = false): LineJob => ({
  id: `j${seq}`,
  seq: BigInt(seq),
  status,
  openAttempt,
});

describe('heldBy: examples', () => {
  it('nothing ahead, or everything ahead ended: not held', () => {
    expect(heldBy(1n, [])).toBeUndefined();
    expect(heldBy(5n, [job(1, 'delivered'), job(2, 'failed'), job(3, 'expired'), job(4, 'superseded')])).toBe(
      undefined,
    );
  });

  it('later jobs and the job itself never hold it', () => {
    expect(
      heldBy(3n, [job(3, 'queued'), job(4, 'in_flight', true), job(9, 'waiting_retry')]),
    ).toBeUndefined();
  });

  it('an earlier unfinished job holds it, whatever its status', () => {
    for (const s of ['queued', 'in_flight', 'waiting_retry'] as const)
      expect(heldBy(3n, [job(2, s)])?.id).toBe('j2');
  });

  it('an ended job holds the line while its attempt is on the wire (superseded or cancelled mid-request)', () => {
    expect(heldBy(3n, [job(1, 'superseded', true), job(2, 'delivered')])?.id).toBe('j1');
    expect(heldBy(3n, [job(2, 'cancelled', true)])?.id).toBe('j2');
    expect(heldBy(3n, [job(2, 'cancelled', false)])).toBeUndefined();
  });

  it('names the nearest of the jobs that hold it', () => {
    expect(heldBy(9n, [job(4, 'superseded', true), job(1, 'queued'), job(7, 'waiting_retry')])?.id).toBe(
      'j7',
    );
    expect(heldBy(9n, [job(7, 'waiting_retry'), job(8, 'superseded', true), job(1, 'queued')])?.id).toBe(
      'j8',
    );
  });

  it('holdsLine: unfinished, or ended with an attempt on the wire', () => {
    expect(holdsLine({ status: 'queued', openAttempt: false })).toBe(true);
    expect(holdsLine({ status: 'delivered', openAttempt: false })).toBe(false);
    expect(holdsLine({ status: 'superseded', openAttempt: true })).toBe(true);
  });
});
