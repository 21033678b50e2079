import fs from 'node:fs';
import net from 'node:net';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** Nearest-rank percentile of a list of numbers (ms); NaN for an empty list. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export interface Latency {
  p50: number;
  p99: number;
  count: number;
}

export const latency = (values: number[]): Latency => ({
  p50: round(percentile(values, 50)),
  p99: round(percentile(values, 99)),
  count: values.length,
});

export const round = (v: number, digits = 1) => {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
};

export const ratio = (ours: number, baseline: number) => (baseline > 0 ? round(ours / baseline, 2) : NaN);

/** Waits until fn answers true, or throws after timeoutMs naming what it waited for. */
export async function waitUntil(what: string, fn: () => boolean | Promise<boolean>, timeoutMs: number) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** Resident set size of a process, in MiB (/proc/<pid>/status VmRSS). */
export function rssMiB(pid: number): number {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /VmRSS:\s+(\d+) kB/.exec(s);
  return m ? round(Number(m[1]) / 1024) : NaN;
}

/** CPU seconds used so far by a process and the threads it waited for (/proc/<pid>/stat). */
export function cpuSeconds(pid: number): number {
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = s.slice(s.lastIndexOf(')') + 2).split(' ');
  // utime, stime are fields 14 and 15 of the full line; here they are at index 11 and 12.
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** Runs tasks with at most `concurrency` in flight. */
export async function pool<T>(items: T[], concurrency: number, fn: (item: T, i: number) => Promise<void>) {
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, lane));
}

/** A small seeded PRNG (mulberry32), so the failure script is the same for every sender. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The event each benchmark sends: the same StreamResponse shape for every sender, marked with its id. */
export function benchStreamResponse(taskId: string, id: string) {
  return {
    statusUpdate: {
      taskId,
      contextId: `ctx-${taskId}`,
      status: { state: 'TASK_STATE_WORKING' },
      metadata: { bench: id },
    },
  };
}

const MARK = /"bench":"([^"]+)"/;
/** The id a benchmark body carries (see benchStreamResponse). */
export const benchIdOf = (body: string): string | undefined => MARK.exec(body)?.[1];

const statFields = (pid: number | string) => {
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return s.slice(s.lastIndexOf(')') + 2).split(' ');
};

/**
 * CPU seconds of a Postgres server so far: the postmaster, the backends it reaped (cutime, cstime)
 * and the backends alive now. `dataDir` holds its postmaster.pid.
 */
export function postgresCpuSeconds(dataDir: string): number {
  const postmaster = Number(fs.readFileSync(`${dataDir}/postmaster.pid`, 'utf8').split('\n')[0]);
  const f = statFields(postmaster);
  let ticks = Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const c = statFields(d);
      if (Number(c[1]) === postmaster) ticks += Number(c[11]) + Number(c[12]);
    } catch {
      // gone meanwhile
    }
  }
  return ticks / 100;
}

/** The whole machine's busy and total jiffies (all cores, /proc/stat), to say how busy a run's machine was. */
export function machineJiffies(): { busy: number; total: number } {
  const cpu = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = cpu.reduce((a, b) => a + b, 0);
  return { busy: total - cpu[3]! - cpu[4]!, total };
}

/** Waits until fn answers true or timeoutMs passes; answers which (a timeout is a result here, not an error). */
export async function settledWithin(
  fn: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await fn()) return true;
    if (Date.now() > until) return false;
    await sleep(50);
  }
}
