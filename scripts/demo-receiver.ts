/**
 * A local HTTPS push receiver for the README walk-through: `npm run demo:receiver`.
 * It trusts a throwaway CA whose certificate it writes to .data/demo-receiver-ca.pem, listens on
 * https://127.0.0.1:8443/hook, prints every push it gets and answers 200.
 */
import fs from 'node:fs';
import path from 'node:path';
import { startReceiver } from '../test/helpers/receiver';
import { makeTestTls } from '../test/helpers/tls';

async function main() {
  const tls = makeTestTls();
  const caPath = path.resolve(__dirname, '..', '.data', 'demo-receiver-ca.pem');
  fs.mkdirSync(path.dirname(caPath), { recursive: true });
  fs.writeFileSync(caPath, tls.caPem);
  const port = Number(process.env.PORT ?? 8443);
  const receiver = await startReceiver({
    port,
    path: '/hook',
    tls,
    script: (req) => {
      const h = req.headers;
      process.stdout.write(
        `\n#${req.n} ${req.method} ${req.path}\n` +
          `  content-type: ${String(h['content-type'])}\n` +
          `  authorization: ${h.authorization ? 'Bearer …' + String(h.authorization).slice(-4) : '(none)'}\n` +
          `  x-a2a-push-delivery: ${String(h['x-a2a-push-delivery'])}\n` +
          `  body: ${req.body.toString('utf8')}\n`,
      );
      return { status: 200 };
    },
  });
  process.stdout.write(
    `demo receiver on ${receiver.url}\nstart the service with:\n` +
      `  OUTBOUND_ALLOW_CIDRS=127.0.0.1/32 OUTBOUND_CA_FILE=${path.relative(process.cwd(), caPath)} npm start\n`,
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
