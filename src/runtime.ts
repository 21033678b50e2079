import fs from 'node:fs';
import type { Logger } from 'pino';
import { requireSettings, type Settings } from './config';
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
}

export function createRuntime(settings: Settings, name: string): Runtime {
  // SEAL_ACTIVE_KEY is named, never taken to be the last key: adding a key to SEAL_KEYS everywhere
  // first, then naming it active, is what lets processes of two versions read each other's seals.
  const s = requireSettings(settings, ['DATABASE_URL', 'SEAL_KEYS', 'SEAL_ACTIVE_KEY']);
  return {
    settings,
    logger: createLogger(settings.LOG_LEVEL, name),
    db: createPool(s.DATABASE_URL),
    keyring: Keyring.parse(s.SEAL_KEYS, s.SEAL_ACTIVE_KEY),
    policy: compilePolicy(settings.OUTBOUND_ALLOW_CIDRS, settings.OUTBOUND_DENY_CIDRS),
  };
}

export function createHttp(rt: Pick<Runtime, 'settings' | 'policy'>): OutboundClient {
  const ca = rt.settings.OUTBOUND_CA_FILE ? fs.readFileSync(rt.settings.OUTBOUND_CA_FILE) : undefined;
  return createOutboundClient({ policy: rt.policy, ...(ca ? { ca } : {}) });
}
