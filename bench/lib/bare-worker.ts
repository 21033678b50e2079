/**
 * The bare baseline's worker, in its own process like ours:
 * `bare-worker.ts <address> <namespace> <taskQueue> <url> <caFile> [lean]`. Its one activity POSTs the
 * benchmark body with undici, as our activity does.
 *
 * `lean` (the floor, `bareLeanDelivery`): the workflows are started from this process, eagerly, by a
 * client on the worker's own connection (eager start needs that), and the POST is a local activity.
 * The process then prints `READY <port>` and takes the starts over HTTP on 127.0.0.1:
 * `POST /start` with `{ items: [{ id, taskId }], concurrency }` starts one workflow per item, that
 * many in flight, and answers `{ sentAt: { [id]: epoch ms }, eager }` (how many starts were eager).
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@temporalio/client';
import { NativeConnection, Worker, Runtime, DefaultLogger } from '@temporalio/worker';
import { Agent, request } from 'undici';
import { benchStreamResponse, pool } from './util';

export const createBareActivities = (url: string, agent: Agent) => ({
  async postOnce(input: { taskId: string; id: string }): Promise<number> {
    const r = await request(url, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/a2a+json', authorization: 'Bearer bench-credential' },
      body: JSON.stringify(benchStreamResponse(input.taskId, input.id)),
    });
    await r.body.dump();
    if (r.statusCode >= 300) throw new Error(`http ${r.statusCode}`);
    return r.statusCode;
  },
});
export type BareActivities = ReturnType<typeof createBareActivities>;

async function main() {
  const [address, namespace, taskQueue, url, caFile, mode] = process.argv.slice(2) as [
    string,
    string,
    string,
    string,
    string,
    string | undefined,
  ];
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const agent = new Agent({ connect: { ca: fs.readFileSync(caFile) } });
  const connection = await NativeConnection.connect({ address });
  const worker = await Worker.create({
    connection,
    namespace,
    taskQueue,
    workflowsPath: require.resolve('./bare-workflow'),
    activities: createBareActivities(url, agent),
    maxConcurrentActivityTaskExecutions: 200,
    // The floor: an eager start needs a free workflow task slot when it is sent, and the SDK's 40 (10
    // of them held by waiting polls) ran out at 32 starts in flight: most starts went through matching.
    ...(mode === 'lean'
      ? { maxConcurrentWorkflowTaskExecutions: 200, maxConcurrentLocalActivityExecutions: 200 }
      : {}),
  });
  const run = worker.run();
  const control =
    mode === 'lean' ? await startControl(new Client({ connection, namespace }), taskQueue) : undefined;
  process.stdout.write(`READY${control ? ` ${(control.address() as AddressInfo).port}` : ''}\n`);
  process.on('SIGTERM', () => {
    control?.close();
    worker.shutdown();
  });
  await run;
  await connection.close();
  await agent.close();
  process.exit(0);
}

/**
 * The lean floor's starter: eager starts of `bareLeanDelivery` from this process (see the file's doc).
 * Answers how many the server started eagerly (the rest went through matching: no free slot).
 */
async function startControl(client: Client, taskQueue: string): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    if (req.method !== 'POST' || req.url !== '/start') {
      res.writeHead(404).end();
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (b: Buffer) => chunks.push(b));
    req.on('error', () => res.destroy());
    req.on('end', () => {
      let input: { items: Array<{ id: string; taskId: string }>; concurrency: number };
      try {
        input = JSON.parse(Buffer.concat(chunks).toString()) as typeof input;
      } catch (err) {
        res.writeHead(400).end(String(err));
        return;
      }
      const sentAt: Record<string, number> = {};
      let eager = 0;
      pool(input.items, input.concurrency, async (e) => {
        sentAt[e.id] = Date.now();
        const h = await client.workflow.start('bareLeanDelivery', {
          workflowId: `bare-lean-${e.id}`,
          taskQueue,
          args: [{ taskId: e.taskId, id: e.id }],
          requestEagerStart: true,
        });
        if (h.eagerlyStarted) eager++;
      }).then(
        () =>
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ sentAt, eager })),
        (err: unknown) => res.writeHead(500).end(String(err)),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

if (require.main === module)
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
