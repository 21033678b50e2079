/**
 * Our api, inbox and N workers as separate processes (`src/main.ts api|inbox|worker`), the way a real
 * deployment runs them: the workers share the task queue. Used by `npm run cluster` and benchmarks.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { freePort, ROOT } from './cluster';

export interface ServiceProcess {
  kind: 'api' | 'inbox' | 'worker';
  label: string;
  port: number;
  process: ChildProcess;
}

export interface ServiceProcesses {
  apiUrl: string;
  inboxUrl: string;
  processes: ServiceProcess[];
  pids: Record<string, number>;
  stop(): Promise<void>;
}

const readyz = async (port: number) => {
  try {
    // Loopback only: our own listener.
    const r = await globalThis.fetch(`http://127.0.0.1:${port}/readyz`);
    return r.status === 200;
  } catch {
    return false;
  }
};

async function waitReady(p: ServiceProcess, logFile: string, ms = 120_000) {
  const until = Date.now() + ms;
  for (;;) {
    if (p.process.exitCode !== null)
      throw new Error(
        `${p.label} exited (${p.process.exitCode}):\n${fs.readFileSync(logFile, 'utf8').slice(-3000)}`,
      );
    if (await readyz(p.port)) return;
    if (Date.now() > until) throw new Error(`${p.label} not ready after ${ms / 1000} s (log: ${logFile})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Starts the api (which migrates the database) first, then the inbox and the workers. `env` carries
 * the settings (DATABASE_URL, TEMPORAL_ADDRESS, SEAL_KEYS, …); ports are free ones unless given.
 */
export async function startServiceProcesses(o: {
  env: Record<string, string>;
  workers: number;
  ports?: { api?: number; inbox?: number; worker?: number };
  logDir: string;
  log?: (l: string) => void;
}): Promise<ServiceProcesses> {
  fs.mkdirSync(o.logDir, { recursive: true });
  const apiPort = o.ports?.api ?? (await freePort());
  const inboxPort = o.ports?.inbox ?? (await freePort());
  const base: Record<string, string> = {
    ...(process.env as Record<string, string>),
    TS_NODE_TRANSPILE_ONLY: 'true',
    ...o.env,
    API_PORT: String(apiPort),
    INBOX_PORT: String(inboxPort),
    PUBLIC_BASE_URL: o.env.PUBLIC_BASE_URL ?? `http://127.0.0.1:${inboxPort}`,
  };
  const processes: ServiceProcess[] = [];
  const logs = new Map<ServiceProcess, string>();
  const start = async (
    kind: ServiceProcess['kind'],
    label: string,
    port: number,
    extra: Record<string, string> = {},
  ) => {
    const logFile = path.join(o.logDir, `${label}.log`);
    const out = fs.openSync(logFile, 'a');
    const child = spawn(process.execPath, ['-r', 'ts-node/register/transpile-only', 'src/main.ts', kind], {
      cwd: ROOT,
      env: { ...base, ...extra },
      stdio: ['ignore', out, out],
    });
    fs.closeSync(out);
    const p = { kind, label, port, process: child };
    processes.push(p);
    logs.set(p, logFile);
    return p;
  };
  const stop = async () => {
    // Listeners first, workers last (they drain their activities).
    const order = [...processes].sort((a, b) => Number(a.kind === 'worker') - Number(b.kind === 'worker'));
    await Promise.all(
      order.map(
        (p) =>
          new Promise<void>((resolve) => {
            if (p.process.exitCode !== null || p.process.signalCode !== null) return resolve();
            p.process.once('exit', () => resolve());
            p.process.kill('SIGTERM');
            setTimeout(() => p.process.kill('SIGKILL'), 30_000).unref();
          }),
      ),
    );
  };
  try {
    const api = await start('api', 'api', apiPort);
    await waitReady(api, logs.get(api)!);
    const rest = [await start('inbox', 'inbox', inboxPort)];
    for (let i = 1; i <= o.workers; i++) {
      const port = i === 1 && o.ports?.worker ? o.ports.worker : await freePort();
      rest.push(
        await start('worker', o.workers === 1 ? 'worker' : `worker-${i}`, port, {
          WORKER_PORT: String(port),
        }),
      );
    }
    await Promise.all(rest.map((p) => waitReady(p, logs.get(p)!)));
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    apiUrl: `http://127.0.0.1:${apiPort}`,
    inboxUrl: base.PUBLIC_BASE_URL!,
    processes,
    pids: Object.fromEntries(processes.map((p) => [p.label, p.process.pid!])),
    stop,
  };
}
