/**
 * Local HTTPS peers for the README walk-throughs: `npm run demo:peers`.
 * - a push receiver on https://127.0.0.1:8443/hook that prints every push and answers 200;
 * - an A2A agent (built on @a2a-js/sdk's server) on https://127.0.0.1:8444 with task `rt-1` WORKING.
 *   Type `state rt-1 TASK_STATE_COMPLETED` to change a task's state and make the agent push it.
 * Both use one throwaway CA, written to .data/demo-ca.pem for OUTBOUND_CA_FILE.
 */
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { startTestAgent, type AgentTaskState } from '../test/helpers/agent';
import { startReceiver } from '../test/helpers/receiver';
import { makeTestTls } from '../test/helpers/tls';

async function main() {
  const tls = makeTestTls();
  const caPath = path.resolve(__dirname, '..', '.data', 'demo-ca.pem');
  fs.mkdirSync(path.dirname(caPath), { recursive: true });
  fs.writeFileSync(caPath, tls.caPem);
  const receiver = await startReceiver({
    port: Number(process.env.RECEIVER_PORT ?? 8443),
    path: '/hook',
    tls,
    script: (req) => {
      const h = req.headers;
      process.stdout.write(
        `\n[receiver] #${req.n} ${req.method} ${req.path}\n` +
          `  content-type: ${String(h['content-type'])}\n` +
          `  authorization: ${h.authorization ? 'Bearer …' + String(h.authorization).slice(-4) : '(none)'}\n` +
          `  x-a2a-push-delivery: ${String(h['x-a2a-push-delivery'])}\n` +
          `  body: ${req.body.toString('utf8')}\n`,
      );
      return { status: 200 };
    },
  });
  const agent = await startTestAgent({ tls, port: Number(process.env.AGENT_PORT ?? 8444) });
  agent.setState('rt-1', 'TASK_STATE_WORKING');
  process.stdout.write(
    `push receiver  ${receiver.url}\nA2A agent      ${agent.url}  (task rt-1 is TASK_STATE_WORKING)\n` +
      `start the service with:\n` +
      `  OUTBOUND_ALLOW_CIDRS=127.0.0.1/32 OUTBOUND_CA_FILE=${path.relative(process.cwd(), caPath)} npm start\n` +
      `then type e.g.: state rt-1 TASK_STATE_COMPLETED\n`,
  );
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', (line) => {
    const [cmd, task, state] = line.trim().split(/\s+/);
    if (cmd !== 'state' || !task || !state)
      return void process.stdout.write('usage: state TASK_ID TASK_STATE_…\n');
    agent.setState(task, state as AgentTaskState);
    void agent
      .push(task)
      .then((r) => process.stdout.write(`[agent] ${task} → ${state}; pushed to ${r.length} config(s)\n`));
  });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
