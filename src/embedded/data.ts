import fs from 'node:fs';
import path from 'node:path';
import { SettingsError } from '../config';
import { Keyring } from '../sealing/keyring';

/** The embedded start keeps everything under .data/ in the project folder. */
export const DATA_DIR = path.resolve(__dirname, '..', '..', '.data');
export const EMBEDDED_PG_PORT = 54329;
export const EMBEDDED_PG_DIR = path.join(DATA_DIR, 'pg');
export const EMBEDDED_DB = 'a2a_push';
export const EMBEDDED_TEMPORAL_PORT = 7233;
export const EMBEDDED_TEMPORAL_UI_PORT = 8233;
export const EMBEDDED_TEMPORAL_DB = path.join(DATA_DIR, 'temporal.db');
const SEAL_FILE = path.join(DATA_DIR, 'seal-keys');

/** SEAL_KEYS for the embedded start: a key file made on first start, readable by the owner only. */
export function embeddedSealKeys(): string {
  fs.mkdirSync(DATA_DIR, { recursive: true });
  if (!fs.existsSync(SEAL_FILE))
    fs.writeFileSync(SEAL_FILE, `${Keyring.generateEntry('k1')}\n`, { mode: 0o600 });
  return fs.readFileSync(SEAL_FILE, 'utf8').trim();
}

/**
 * The sealing keys of `npm start`, `npm run cluster` and `npm run reseal` (contract §8): SEAL_KEYS given
 * needs SEAL_ACTIVE_KEY, as everywhere else; without it the key file under .data/, whose last key is the
 * active one unless SEAL_ACTIVE_KEY names another.
 */
export function sealKeysOrKeyFile(env: NodeJS.ProcessEnv): { keys: string; active: string } {
  if (env.SEAL_KEYS) {
    if (!env.SEAL_ACTIVE_KEY) throw new SettingsError('SEAL_ACTIVE_KEY is required when SEAL_KEYS is set');
    return { keys: env.SEAL_KEYS, active: env.SEAL_ACTIVE_KEY };
  }
  const keys = embeddedSealKeys();
  return { keys, active: env.SEAL_ACTIVE_KEY || Keyring.parse(keys).activeKeyId };
}
