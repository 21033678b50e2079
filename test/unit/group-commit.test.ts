import { GroupCommit } from '../../src/inbox/group-commit';

/** A write that the test completes by hand, recording the batches it was given. */
function manualWrites() {
  const batches: number[][] = [];
  const pending: Array<{ resolve: () => void; reject: (e: Error) => void }> = [];
  const write = (items: number[]) =>
    new Promise<string[]>((resolve, reject) => {
      batches.push(items);
      pending.push({ resolve: () => resolve(items.map((i) => `stored ${i}`)), reject });
    });
  return { batches, pending, write };
}

/** A write that holds the batch [0] until released and throws what `fail` answers for a batch. */
function gatedWrites(fail: (items: number[]) => Error | undefined) {
  const batches: number[][] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const write = async (items: number[]) => {
    batches.push(items);
    if (items.length === 1 && items[0] === 0) await gate;
    const err = fail(items);
    if (err) throw err;
    return items.map((i) => `stored ${i}`);
  };
  return { batches, release: () => release(), write };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('GroupCommit', () => {
  it('writes an item at once when a slot is free, and what arrives meanwhile together in the next write', async () => {
    const w = manualWrites();
    const g = new GroupCommit(w.write, 1, 64);
    const first = g.submit(1);
    await tick();
    expect(w.batches).toEqual([[1]]);
    const rest = [2, 3, 4].map((i) => g.submit(i));
    await tick();
    expect(w.batches).toEqual([[1]]);
    expect(g.waiting()).toBe(3);
    w.pending[0]!.resolve();
    expect(await first).toBe('stored 1');
    await tick();
    expect(w.batches).toEqual([[1], [2, 3, 4]]);
    w.pending[1]!.resolve();
    expect(await Promise.all(rest)).toEqual(['stored 2', 'stored 3', 'stored 4']);
  });

  it('runs up to maxInFlight writes at once and cuts batches at maxBatch', async () => {
    const w = manualWrites();
    const g = new GroupCommit(w.write, 2, 3);
    const all = [1, 2].map((i) => g.submit(i));
    await tick();
    expect(w.batches).toEqual([[1], [2]]);
    all.push(...[3, 4, 5, 6, 7].map((i) => g.submit(i)));
    await tick();
    expect(w.batches).toHaveLength(2);
    w.pending[0]!.resolve();
    w.pending[1]!.resolve();
    await tick();
    await tick();
    expect(w.batches).toEqual([[1], [2], [3, 4, 5], [6, 7]]);
    w.pending[2]!.resolve();
    w.pending[3]!.resolve();
    expect(await Promise.all(all)).toEqual([1, 2, 3, 4, 5, 6, 7].map((i) => `stored ${i}`));
  });

  it('a failed write rejects its own batch only; the next batch still goes', async () => {
    const w = manualWrites();
    const g = new GroupCommit(w.write, 1, 64);
    const a = g.submit(1);
    await tick();
    const b = g.submit(2);
    w.pending[0]!.reject(new Error('connection lost'));
    await expect(a).rejects.toThrow('connection lost');
    await tick();
    expect(w.batches).toEqual([[1], [2]]);
    w.pending[1]!.resolve();
    expect(await b).toBe('stored 2');
  });

  it('a batch the database refused for one item is stored item by item: only that item fails', async () => {
    class Refused extends Error {}
    const w = gatedWrites((items) => (items.includes(13) ? new Refused('invalid byte sequence') : undefined));
    const g = new GroupCommit(w.write, 1, 64, (err) => err instanceof Refused);
    const first = g.submit(0);
    await tick();
    const rest = [12, 13, 14].map((i) => g.submit(i).catch((e: Error) => `failed: ${e.message}`));
    w.release();
    expect(await first).toBe('stored 0');
    expect(await Promise.all(rest)).toEqual(['stored 12', 'failed: invalid byte sequence', 'stored 14']);
    expect(w.batches).toEqual([[0], [12, 13, 14], [12], [13], [14]]);
  });

  it('a batch that failed for any other reason (the outcome is unknown) fails whole, and is not tried again', async () => {
    const w = gatedWrites((items) =>
      items[0] === 0 ? undefined : new Error('Connection terminated unexpectedly'),
    );
    const g = new GroupCommit(w.write, 1, 64, () => false);
    const first = g.submit(0);
    await tick();
    const rest = [1, 2].map((i) => g.submit(i).catch((e: Error) => `failed: ${e.message}`));
    w.release();
    await first;
    expect(await Promise.all(rest)).toEqual([
      'failed: Connection terminated unexpectedly',
      'failed: Connection terminated unexpectedly',
    ]);
    expect(w.batches).toEqual([[0], [1, 2]]);
  });

  it('a write answering the wrong number of results fails its batch instead of answering someone else’s', async () => {
    const g = new GroupCommit(async (items: number[]) => items.slice(1), 1, 64);
    await expect(g.submit(1)).rejects.toThrow('0 results for 1 items');
    const wrong = new GroupCommit((): Promise<number[]> => {
      throw new Error('sync throw');
    });
    await expect(wrong.submit(1)).rejects.toThrow('sync throw');
  });
});
