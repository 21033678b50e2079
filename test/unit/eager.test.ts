import { EagerStarts } from '../../src/starts/eager';

describe('EagerStarts (eager starts in flight per tenant, in one process)', () => {
  it('gives each tenant `perTenant` places; a place given back goes to the next start', () => {
    const e = new EagerStarts(2);
    expect(e.take('j1', 'a')).toBe(true);
    expect(e.take('j2', 'a')).toBe(true);
    // Tenant a is at its share; b is not held up by it.
    expect(e.take('j3', 'a')).toBe(false);
    expect(e.take('k1', 'b')).toBe(true);
    expect(e.inFlight('a')).toBe(2);
    expect(e.inFlight()).toBe(3);
    e.done('j1');
    expect(e.take('j3', 'a')).toBe(true);
    expect(e.inFlight('a')).toBe(2);
  });

  it('a job counts once: a second starter of a job that holds a place gets none (its start is not eager), and giving back a job it does not hold changes nothing', () => {
    const e = new EagerStarts(2);
    expect(e.take('j1', 'a')).toBe(true);
    expect(e.take('j1', 'a')).toBe(false);
    expect(e.inFlight('a')).toBe(1);
    e.done('unknown');
    e.done('j1');
    e.done('j1');
    expect(e.inFlight('a')).toBe(0);
    expect(e.take('j2', 'a')).toBe(true);
  });

  it('forgets a place not given back within `forgetMs` (its task never came to this worker)', () => {
    let now = 0;
    const e = new EagerStarts(1, 1_000, () => now);
    expect(e.take('lost', 'a')).toBe(true);
    now = 600;
    expect(e.take('j2', 'a')).toBe(false);
    now = 1_001;
    expect(e.take('j2', 'a')).toBe(true);
    expect(e.inFlight('a')).toBe(1);
  });

  it('forgets by the time a place was taken, also after places given back and taken again', () => {
    let now = 0;
    const e = new EagerStarts(3, 1_000, () => now);
    e.take('j1', 'a');
    now = 100;
    e.take('j2', 'a');
    e.done('j1');
    now = 200;
    e.take('j1', 'a'); // taken again: now the youngest
    now = 1_150;
    // j2 (taken at 100) is forgotten; j1 (taken again at 200) is not.
    expect(e.inFlight('a')).toBe(1);
    now = 1_250;
    expect(e.inFlight('a')).toBe(0);
  });
});
