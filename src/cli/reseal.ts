import { embeddedSealKeys } from '../embedded/data';
import { Keyring } from '../sealing/keyring';
import { resealAll } from '../sealing/secrets';
import { commandDb } from './db';

/**
 * `npm run reseal`: moves every sealed value to SEAL_ACTIVE_KEY. With DATABASE_URL both SEAL_KEYS and
 * SEAL_ACTIVE_KEY are required, as for the service; on the embedded data the key file's last key.
 */
async function main() {
  const embedded = !process.env.DATABASE_URL;
  const keys = process.env.SEAL_KEYS || (embedded ? embeddedSealKeys() : undefined);
  if (!keys) throw new Error('SEAL_KEYS is required with DATABASE_URL');
  const active = process.env.SEAL_ACTIVE_KEY || undefined;
  if (!active && !embedded) throw new Error('SEAL_ACTIVE_KEY is required with DATABASE_URL');
  const keyring = Keyring.parse(keys, active);
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
