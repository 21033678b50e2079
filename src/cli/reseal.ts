import { sealKeysOrKeyFile } from '../embedded/data';
import { Keyring } from '../sealing/keyring';
import { resealAll } from '../sealing/secrets';
import { commandDb } from './db';

/**
 * `npm run reseal`: moves every sealed value to SEAL_ACTIVE_KEY. The same keys as the service: SEAL_KEYS
 * and SEAL_ACTIVE_KEY (required with DATABASE_URL), or on the embedded data the key file under .data/
 * with its last key as the active one (as `npm start`).
 */
async function main() {
  if (!process.env.SEAL_KEYS && process.env.DATABASE_URL)
    throw new Error('SEAL_KEYS is required with DATABASE_URL');
  const { keys, active } = sealKeysOrKeyFile(process.env);
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
