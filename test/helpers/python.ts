/**
 * The Python peers of the interop tests (test/interop/*.py), built on the Python reference A2A SDK
 * in the virtual environment that scripts/install-python-sdk.js creates (.tools/a2a-py). Each is
 * spawned with the venv's python, gets the test certificate as files, answers one "ready" line with
 * its URL on stdout, is steered and read over its loopback control routes, and stops when its stdin
 * closes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { Agent, fetch as undiciFetch } from 'undici';
import type { AgentTaskState } from './agent';
import { makeTestTls, type TestTls } from './tls';

const ROOT = path.resolve(__dirname, '..', '..');
export const VENV_PYTHON = path.join(ROOT, '.tools', 'a2a-py', 'bin', 'python');
const SCRIPTS = path.join(ROOT, 'test', 'interop');

interface PythonPeer {
  url: string;
  /** GET/POST a control route; answers its JSON */
  control<T>(route: string, body?: unknown): Promise<T>;
  /** what the process wrote on stderr (the SDK's and uvicorn's warnings) */
  stderr(): string;
  close(): Promise<void>;
}

function tlsFiles(tls: TestTls): { cert: string; key: string; ca: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-push-py-'));
  process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  fs.writeFileSync(cert, tls.certPem);
  fs.writeFileSync(key, tls.keyPem, { mode: 0o600 });
  return { cert, key, ca: tls.caFile };
}

async function startPeer(script: string, args: string[], tls: TestTls): Promise<PythonPeer> {
  if (!fs.existsSync(VENV_PYTHON))
    throw new Error(`${VENV_PYTHON} is missing: run node scripts/install-python-sdk.js`);
  const child: ChildProcess = spawn(VENV_PYTHON, [path.join(SCRIPTS, script), ...args], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, PYTHONUNBUFFERED: '1', PYTHONDONTWRITEBYTECODE: '1' },
  });
  let err = '';
  child.stderr!.on('data', (c: Buffer) => {
    err += c.toString('utf8');
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${script}: no ready line after 20 s; stderr: ${err}`)),
      20_000,
    );
    const rl = readline.createInterface({ input: child.stdout! });
    rl.once('line', (line) => {
      clearTimeout(timer);
      try {
        resolve((JSON.parse(line) as { url: string }).url);
      } catch {
        reject(new Error(`${script}: unexpected first line ${line}; stderr: ${err}`));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${script} exited with ${code}; stderr: ${err}`));
    });
  });
  const dispatcher = new Agent({ connect: { ca: tls.caPem } });
  return {
    url,
    async control<T>(route: string, body?: unknown): Promise<T> {
      const res = await undiciFetch(`${url}${route}`, {
        method: body === undefined ? 'GET' : 'POST',
        dispatcher,
        ...(body === undefined
          ? {}
          : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
      });
      const json = (await res.json()) as T;
      if (!res.ok) throw new Error(`${script} ${route}: ${res.status} ${JSON.stringify(json)}`);
      return json;
    },
    stderr: () => err,
    async close() {
      if (child.exitCode === null && child.signalCode === null) {
        await new Promise<void>((resolve) => {
          const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
          child.once('exit', () => {
            clearTimeout(kill);
            resolve();
          });
          child.stdin!.end();
        });
      }
      await dispatcher.close();
    },
  };
}

/** One POST the Python SDK's BasePushNotificationSender made, recorded by httpx hooks on its client. */
export interface PythonPushRecord {
  url: string;
  method: string;
  /** lower-cased, as httpx sent them */
  headers: Record<string, string>;
  body: string;
  /** seconds since the epoch */
  at: number;
  /** absent when no answer came */
  status?: number;
  answeredAt?: number;
}

export interface PythonSenderLog {
  level: string;
  message: string;
  exception: string | null;
  at: number;
}

export interface PythonAgentCall {
  method: string;
  path: string;
  rpcMethod: string | null;
  a2aVersion: string | null;
  authorization: string | null;
}

export interface PythonAgent {
  url: string;
  /** the running task publishes this state (the SDK pushes it); a terminal state ends the task */
  command(taskId: string, state: AgentTaskState): Promise<void>;
  pushes(): Promise<{ pushes: PythonPushRecord[]; logs: PythonSenderLog[] }>;
  calls(): Promise<PythonAgentCall[]>;
  configs(
    taskId: string,
  ): Promise<Array<{ id: string; url: string; token: string; scheme: string; credentials: string }>>;
  stderr(): string;
  close(): Promise<void>;
}

export async function startPythonAgent(
  o: { transport?: 'JSONRPC' | 'HTTP+JSON'; tls?: TestTls } = {},
): Promise<PythonAgent> {
  const tls = o.tls ?? makeTestTls();
  const f = tlsFiles(tls);
  const peer = await startPeer(
    'python_agent.py',
    ['--cert', f.cert, '--key', f.key, '--ca', f.ca, '--transport', o.transport ?? 'JSONRPC'],
    tls,
  );
  return {
    url: peer.url,
    async command(taskId, state) {
      await peer.control(`/control/tasks/${encodeURIComponent(taskId)}/state`, { state });
    },
    pushes: () => peer.control('/control/pushes'),
    calls: async () => (await peer.control<{ calls: PythonAgentCall[] }>('/control/calls')).calls,
    configs: async (taskId) =>
      (
        await peer.control<{
          configs: Array<{ id: string; url: string; token: string; scheme: string; credentials: string }>;
        }>(`/control/tasks/${encodeURIComponent(taskId)}/configs`)
      ).configs,
    stderr: peer.stderr,
    close: peer.close,
  };
}

export interface PythonReceived {
  path: string;
  headers: Record<string, string>;
  body: string;
  /** the StreamResponse field the parse found: task, message, status_update, artifact_update */
  payload?: string;
  /** the parsed message written back with MessageToDict */
  parsed?: Record<string, unknown>;
  /** the protobuf parser's error, when the body did not parse (answered 400) */
  error?: string;
}

export interface PythonReceiver {
  url: string;
  received(): Promise<PythonReceived[]>;
  close(): Promise<void>;
}

export async function startPythonReceiver(o: { tls?: TestTls } = {}): Promise<PythonReceiver> {
  const tls = o.tls ?? makeTestTls();
  const f = tlsFiles(tls);
  const peer = await startPeer('python_receiver.py', ['--cert', f.cert, '--key', f.key], tls);
  return {
    url: peer.url,
    received: async () => (await peer.control<{ received: PythonReceived[] }>('/control/received')).received,
    close: peer.close,
  };
}
