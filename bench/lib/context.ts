import type { EmbeddedPg } from '../../src/embedded/postgres';
import type { BenchReceiver } from './receiver';
import type { BenchResult } from './report';
import type { startBenchTemporal } from './stack';

export type BenchTemporal = Awaited<ReturnType<typeof startBenchTemporal>>;

export interface BenchContext {
  quick: boolean;
  dir: string;
  pg: EmbeddedPg;
  /** The run's Postgres data folder (its postmaster.pid: CPU of the server and its backends). */
  pgDir: string;
  receiver: BenchReceiver;
  /** The run's shared dev server with the embedded default store (WAL + synchronous=normal). */
  temporal(): Promise<BenchTemporal>;
  log(line: string): void;
}

export interface Benchmark {
  name: string;
  title: string;
  run(ctx: BenchContext): Promise<BenchResult>;
}
