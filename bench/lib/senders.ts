import { spawn } from 'node:child_process';
import path from 'node:path';
import { ROOT } from './stack';
import type { SenderJob, SenderResult } from './direct-sender';

/** Runs baseline (b) or (c) in its own process and answers when every event was sent once. */
export function runDirectSender(job: SenderJob): Promise<SenderResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['-r', 'ts-node/register/transpile-only', path.join(__dirname, 'direct-sender.ts')],
      {
        cwd: ROOT,
        env: { ...process.env, BENCH_SENDER_JOB: JSON.stringify(job), NODE_EXTRA_CA_CERTS: job.caFile },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.once('exit', (code) => {
      const m = /RESULT (.*)\n/.exec(out);
      if (code === 0 && m) resolve(JSON.parse(m[1]!) as SenderResult);
      else reject(new Error(`direct sender (${job.mode}) exited with ${code}`));
    });
  });
}
