/**
 * Runs outside jest, in its own process: embedded Postgres on the given data
 * folder and port, kept when it stops, so a fault test can stop it and start it again on the same data.
 * Prints one JSON line when ready; stops Postgres (fast shutdown) on SIGTERM or when stdin closes.
 */
import { startEmbeddedPostgres } from '../../../src/embedded/postgres';

async function main() {
  const [dir, port] = process.argv.slice(2);
  if (!dir || !port) throw new Error('usage: pg-server.ts DIR PORT');
  const pg = await startEmbeddedPostgres({ dir, port: Number(port), databases: ['a2a_push'] });
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await pg.stop().catch(() => undefined);
    process.exit(0);
  };
  process.stdin.on('end', () => void stop());
  process.stdin.on('close', () => void stop());
  process.stdin.resume();
  process.on('SIGTERM', () => void stop());
  process.stdout.write(JSON.stringify({ url: pg.url('a2a_push') }) + '\n');
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
