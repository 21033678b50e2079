/**
 * Group commit: items handed in while `maxInFlight` writes are running wait and go together in the
 * next write (at most `maxBatch` per write); with a write slot free, an item goes at once. So an idle
 * service adds no delay, and under load the database pays one statement and one commit per batch
 * instead of per item. Each caller's promise settles when its own write has (committed or failed):
 * nothing is answered before it is durable. `write` answers one result per item, in order.
 */
export class GroupCommit<I, R> {
  private readonly queue: Array<{ item: I; resolve: (r: R) => void; reject: (e: unknown) => void }> = [];
  private inFlight = 0;

  constructor(
    private readonly write: (items: I[]) => Promise<R[]>,
    private readonly maxInFlight = 2,
    private readonly maxBatch = 64,
  ) {}

  submit(item: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.pump();
    });
  }

  /** Items waiting for a write slot (a metric of how far writes lag behind). */
  waiting(): number {
    return this.queue.length;
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      this.inFlight++;
      // A write that throws synchronously still settles its batch.
      Promise.resolve()
        .then(() => this.write(batch.map((b) => b.item)))
        .then((results) => {
          if (results.length !== batch.length)
            throw new Error(`group commit: ${results.length} results for ${batch.length} items`);
          batch.forEach((b, i) => b.resolve(results[i]!));
        })
        .catch((err: unknown) => batch.forEach((b) => b.reject(err)))
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
  }
}
