/**
 * Baselines (b) and (c), in their own process: `@a2a-js/sdk`'s DefaultPushNotificationSender, or raw
 * undici, POSTing the benchmark events to the receiver. The job comes as JSON in BENCH_SENDER_JOB; the
 * answer is one line `RESULT {...}` with the time each event was handed to the sender.
 * The SDK posts with the global fetch, so this process trusts the test CA through NODE_EXTRA_CA_CERTS.
 */
import fs from 'node:fs';
import { StreamResponse } from '@a2a-js/sdk';
import {
  DefaultPushNotificationSender,
  InMemoryPushNotificationStore,
  ServerCallContext,
} from '@a2a-js/sdk/server';
import { Agent, request } from 'undici';
import { benchStreamResponse, pool } from './util';

export interface SenderJob {
  mode: 'sdk' | 'undici';
  url: string;
  caFile: string;
  concurrency: number;
  items: Array<{ taskId: string; id: string }>;
}

export interface SenderResult {
  sentAt: Record<string, number>;
  elapsedMs: number;
  failures: number;
}

async function main() {
  const job = JSON.parse(process.env.BENCH_SENDER_JOB!) as SenderJob;
  const sentAt: Record<string, number> = {};
  let failures = 0;
  // The SDK logs every push with console.info and every failure with console.error: keep stdout for the result.
  console.info = () => undefined;
  console.error = () => {
    failures++;
  };
  let send: (item: { taskId: string; id: string }) => Promise<void>;
  let close = async () => undefined as unknown;
  if (job.mode === 'sdk') {
    const store = new InMemoryPushNotificationStore();
    const context = new ServerCallContext({ requestedVersion: '1.0' } as never);
    const sender = new DefaultPushNotificationSender(store);
    for (const taskId of new Set(job.items.map((i) => i.taskId)))
      await store.save(taskId, context, {
        id: `cfg-${taskId}`,
        taskId,
        url: job.url,
        token: '',
        authentication: { scheme: 'Bearer', credentials: 'bench-credential' },
      } as never);
    send = (item) => sender.send(StreamResponse.fromJSON(benchStreamResponse(item.taskId, item.id)), context);
  } else {
    const agent = new Agent({ connect: { ca: fs.readFileSync(job.caFile) } });
    close = () => agent.close();
    send = async (item) => {
      try {
        const r = await request(job.url, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/a2a+json', authorization: 'Bearer bench-credential' },
          body: JSON.stringify(benchStreamResponse(item.taskId, item.id)),
        });
        await r.body.dump();
        if (r.statusCode >= 300) failures++;
      } catch {
        failures++;
      }
    };
  }
  const t0 = Date.now();
  await pool(job.items, job.concurrency, async (item) => {
    sentAt[item.id] = Date.now();
    await send(item);
  });
  const result: SenderResult = { sentAt, elapsedMs: Date.now() - t0, failures };
  await close();
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(String(err) + '\n');
  process.exit(1);
});
