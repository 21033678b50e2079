import fs from 'node:fs';
import type { Logger } from 'pino';
import { removedSettingsIn, requireSettings, type Settings } from './config';
import { PgListener } from './db/listen';
import { createPool, type Db } from './db/pool';
import { compilePolicy, createOutboundClient, type AddressPolicy, type OutboundClient } from './outbound';
import { Keyring } from './sealing/keyring';
import { createLogger } from './logger';

/** What every process builds from its settings. */
export interface Runtime {
  settings: Settings;
  logger: Logger;
  db: Db;
  keyring: Keyring;
  policy: AddressPolicy;
  /** The process's one LISTEN connection (connected when first used). */
  listener: PgListener;
}

export function createRuntime(settings: Settings, name: string): Runtime {
  // SEAL_ACTIVE_KEY is named, never taken to be the last key: adding a key to SEAL_KEYS everywhere
  // first, then naming it active, is what lets processes of two versions read each other's seals.
  const s = requireSettings(settings, ['DATABASE_URL', 'SEAL_KEYS', 'SEAL_ACTIVE_KEY']);
  const logger = createLogger(settings.LOG_LEVEL, name);
  for (const gone of removedSettingsIn(process.env))
    logger.warn(
      { setting: gone },
      `${gone} is no longer a setting and is ignored (docs/decisions.md, "Starts")`,
    );
  return {
    settings,
    logger,
    listener: new PgListener(s.DATABASE_URL, logger),
    db: createPool(s.DATABASE_URL),
    keyring: Keyring.parse(s.SEAL_KEYS, s.SEAL_ACTIVE_KEY),
    policy: compilePolicy(settings.OUTBOUND_ALLOW_CIDRS, settings.OUTBOUND_DENY_CIDRS),
  };
}

export function createHttp(rt: Pick<Runtime, 'settings' | 'policy'>): OutboundClient {
  const ca = rt.settings.OUTBOUND_CA_FILE ? fs.readFileSync(rt.settings.OUTBOUND_CA_FILE) : undefined;
  return createOutboundClient({ policy: rt.policy, ...(ca ? { ca } : {}) });
}

/** Ends what a runtime holds open: its LISTEN connection and its pool. */
export async function closeRuntime(rt: Pick<Runtime, 'db' | 'listener'>): Promise<void> {
  await rt.listener.stop();
  await rt.db.end();
}
