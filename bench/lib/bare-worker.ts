/**
 * The bare baseline's worker, in its own process like ours: `bare-worker.ts <address> <namespace> <taskQueue> <url> <caFile>`.
 * Its one activity POSTs the benchmark body with undici, as our activity does.
 */
import fs from 'node:fs';
import { NativeConnection, Worker, Runtime, DefaultLogger } from '@temporalio/worker';
import { Agent, request } from 'undici';
import { benchStreamResponse } from './util';

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
  const [address, namespace, taskQueue, url, caFile] = process.argv.slice(2) as [
    string,
    string,
    string,
    string,
    string,
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
  });
  const run = worker.run();
  process.stdout.write('READY\n');
  process.on('SIGTERM', () => worker.shutdown());
  await run;
  await connection.close();
  await agent.close();
  process.exit(0);
}

if (require.main === module)
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
