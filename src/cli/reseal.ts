import { embeddedSealKeys } from '../embedded/data';
import { Keyring } from '../sealing/keyring';
import { resealAll } from '../sealing/secrets';
import { commandDb } from './db';

/** `npm run reseal`: moves every sealed value to SEAL_ACTIVE_KEY (default: the last key of SEAL_KEYS). */
async function main() {
  const keys = process.env.SEAL_KEYS ?? (process.env.DATABASE_URL ? undefined : embeddedSealKeys());
  if (!keys) throw new Error('SEAL_KEYS is required with DATABASE_URL');
  const keyring = Keyring.parse(keys, process.env.SEAL_ACTIVE_KEY || undefined);
  const { db, close } = await commandDb();
  try {
    const n = await resealAll(db, keyring);
    process.stdout.write(`resealed ${n} value(s) under key "${keyring.activeKeyId}"\n`);
  } finally {
    await close();
  }
}

main().catch((err: unknown) => {
  console.error((err as Error).message);
  process.exit(1);
});
