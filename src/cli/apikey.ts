import { createApiKey, revokeApiKey } from '../db/apikeys';
import { commandDb } from './db';

const USAGE = `usage:
  npm run apikey -- create --tenant NAME   prints a new key once (stored hashed)
  npm run apikey -- revoke KEY_ID          the key stops working at once`;

async function main(argv: string[]) {
  const [cmd, ...rest] = argv;
  if (cmd === 'create') {
    const i = rest.indexOf('--tenant');
    const tenant = i >= 0 ? rest[i + 1] : undefined;
    if (!tenant || !/^[A-Za-z0-9._~:-]{1,128}$/.test(tenant))
      throw new Error(`--tenant NAME is required\n${USAGE}`);
    const { db, close } = await commandDb();
    try {
      const k = await createApiKey(db, tenant, undefined, 'cli');
      process.stdout.write(
        `tenant  ${k.tenantId}\nkey id  ${k.id}\nkey     ${k.key}\n(the key is shown once; it is stored hashed)\n`,
      );
    } finally {
      await close();
    }
    return;
  }
  if (cmd === 'revoke') {
    const id = rest[0];
    if (!id) throw new Error(`KEY_ID is required\n${USAGE}`);
    const { db, close } = await commandDb();
    try {
      const ok = await revokeApiKey(db, id, 'cli');
      process.stdout.write(ok ? `revoked ${id}\n` : `no active key ${id}\n`);
      if (!ok) process.exitCode = 1;
    } finally {
      await close();
    }
    return;
  }
  throw new Error(USAGE);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  console.error((err as Error).message);
  process.exit(2);
});
