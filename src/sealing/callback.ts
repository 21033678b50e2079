import crypto from 'node:crypto';

/** Inbox callback credentials: 32 random bytes (base64url), stored as SHA-256, compared in constant time. */
export function newCallbackCredential(): { credential: string; hash: Buffer } {
  const credential = crypto.randomBytes(32).toString('base64url');
  return { credential, hash: hashCallbackCredential(credential) };
}

export const hashCallbackCredential = (credential: string) =>
  crypto.createHash('sha256').update(credential).digest();

// Compared against when the registration is unknown, so that case costs the same as a wrong credential.
const DUMMY = crypto.randomBytes(32);

export function verifyCallbackCredential(
  given: string | undefined,
  stored: Buffer | null | undefined,
): boolean {
  const expected = stored && stored.length === 32 ? stored : DUMMY;
  const ok = crypto.timingSafeEqual(hashCallbackCredential(given ?? ''), expected);
  return ok && given !== undefined && expected !== DUMMY;
}

/** Two stored credential hashes compared in constant time (the inbox re-checks a cached one). */
export const sameCallbackHash = (stored: Buffer | null, checked: Buffer): boolean =>
  stored !== null && stored.length === checked.length && crypto.timingSafeEqual(stored, checked);
