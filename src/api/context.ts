import type { Request, Response } from 'express';
import type { Logger } from 'pino';
import type { Client } from '@temporalio/client';
import type { Settings } from '../config';
import type { Db, Tx } from '../db/pool';
import { inTx } from '../db/pool';
import type { AddressPolicy } from '../outbound';
import type { Keyring } from '../sealing/keyring';
import type { Relay } from '../starts/relay';
import { claimIdempotencyKey, storeIdempotentAnswer } from './idempotency';

export interface ApiDeps {
  db: Db;
  keyring: Keyring;
  settings: Settings;
  policy: AddressPolicy;
  logger: Logger;
  temporal: Client;
  /** This process's relay: starts the jobs a route's statement made due, and wakes running workflows. */
  relay: Pick<Relay, 'leaseMs' | 'take' | 'wake' | 'kick'>;
}

export interface Caller {
  tenantId: string;
  apiKeyId: string;
}

export const callerOf = (res: Response): Caller => res.locals.caller as Caller;

export interface Answer {
  status: number;
  body?: unknown;
  /** What Idempotency-Key keeps instead of body, when body holds a secret shown once. */
  stored?: unknown;
  /** Runs after the commit and the answer: workflow starts and signals never hold up a write. */
  after?: () => unknown;
}

/** Runs a write in one transaction, honouring Idempotency-Key; 4xx and 5xx roll back and store nothing. */
export async function writeAnswer(
  deps: ApiDeps,
  req: Request,
  res: Response,
  requestBody: unknown,
  fn: (tx: Tx) => Promise<Answer>,
  /** Rewrites a stored answer on replay (a pending embedded registration hands out a fresh credential). */
  onReplay?: (tx: Tx, stored: { status: number; body: unknown }) => Promise<Answer>,
): Promise<void> {
  const { tenantId } = callerOf(res);
  const key = req.get('idempotency-key');
  const answer = await inTx(deps.db, async (tx) => {
    if (key !== undefined) {
      const stored = await claimIdempotencyKey(tx, tenantId, key, {
        method: req.method,
        path: req.path,
        body: requestBody,
      });
      if (stored) {
        const a = onReplay ? await onReplay(tx, stored) : { status: stored.status, body: stored.body };
        return { ...a, replayed: true } as Answer & { replayed?: boolean };
      }
    }
    const a = await fn(tx);
    if (key !== undefined)
      await storeIdempotentAnswer(tx, tenantId, key, { status: a.status, body: a.stored ?? a.body ?? null });
    return a as Answer & { replayed?: boolean };
  });
  sendAnswer(deps, res, answer);
}

/**
 * writeAnswer for a write that is one statement (atomic by itself): without Idempotency-Key it runs
 * on the pool in autocommit, one round trip instead of BEGIN, the statement and COMMIT.
 */
export async function writeOneStatement(
  deps: ApiDeps,
  req: Request,
  res: Response,
  requestBody: unknown,
  fn: (q: Db | Tx) => Promise<Answer>,
): Promise<void> {
  if (req.get('idempotency-key') !== undefined) return writeAnswer(deps, req, res, requestBody, fn);
  sendAnswer(deps, res, await fn(deps.db));
}

function sendAnswer(deps: ApiDeps, res: Response, answer: Answer & { replayed?: boolean }): void {
  if (answer.replayed) res.setHeader('Idempotent-Replayed', 'true');
  if (answer.body === undefined) res.status(answer.status).end();
  else res.status(answer.status).json(answer.body);
  if (answer.after)
    Promise.resolve(answer.after()).catch((err: unknown) =>
      deps.logger.warn({ err }, 'after-commit step failed'),
    );
}
