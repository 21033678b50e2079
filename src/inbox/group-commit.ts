/**
 * Group commit: items handed in while `maxInFlight` writes are running wait and go together in the
 * next write (at most `maxBatch` per write); with a write slot free, an item goes at once. So an idle
 * service adds no delay, and under load the database pays one statement and one commit per batch
 * instead of per item. Each caller's promise settles when its own write has (committed or failed):
 * nothing is answered before it is durable. `write` answers one result per item, in order.
 *
 * A write that fails for a reason `retryAlone` accepts (one item the database refused, the statement
 * rolled back) is tried again item by item, so one bad item fails only its own caller; any other
 * failure (a lost connection: the outcome is unknown) fails the batch.
 */
export class GroupCommit<I, R> {
  private readonly queue: Array<{ item: I; resolve: (r: R) => void; reject: (e: unknown) => void }> = [];
  private inFlight = 0;

  constructor(
    private readonly write: (items: I[]) => Promise<R[]>,
    private readonly maxInFlight = 2,
    private readonly maxBatch = 64,
    private readonly retryAlone: (err: unknown) => boolean = () => false,
  ) {}

  submit(item: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.pump();
    });
  }

  /** Items waiting for a write slot: how far writes lag behind (the inbox caps it). */
  waiting(): number {
    return this.queue.length;
  }

  /** One write for the batch; settles every item when it succeeds, throws (settling none) when not. */
  private async run(batch: Array<{ item: I; resolve: (r: R) => void }>): Promise<void> {
    const results = await this.write(batch.map((b) => b.item));
    if (results.length !== batch.length)
      throw new Error(`group commit: ${results.length} results for ${batch.length} items`);
    batch.forEach((b, i) => b.resolve(results[i]!));
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      this.inFlight++;
      this.run(batch)
        .catch(async (err: unknown) => {
          if (batch.length > 1 && this.retryAlone(err))
            await Promise.all(batch.map((b) => this.run([b]).catch((e: unknown) => b.reject(e))));
          else batch.forEach((b) => b.reject(err));
        })
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
  }
}
