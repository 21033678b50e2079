import fs from 'node:fs';
import path from 'node:path';
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
