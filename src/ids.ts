import crypto from 'node:crypto';

/** Deterministic workflow ids, built in one place (never inline). */
export const makeDeliveryWorkflowId = (jobId: string) => `delivery-${jobId}`;
export const makeRegistrationWorkflowId = (registrationId: string) => `registration-${registrationId}`;

/** taskId and config ids: 1-128 of [A-Za-z0-9._~:-], not "." or "..". */
export const ID_PATTERN = /^[A-Za-z0-9._~:-]{1,128}$/;
export const isValidId = (s: string) => ID_PATTERN.test(s) && s !== '.' && s !== '..';

/** The callback URL handed out for a registration. */
export function callbackUrl(publicBaseUrl: string, registrationId: string): string {
  return `${publicBaseUrl.replace(/\/+$/, '')}/a2a/push/${registrationId}`;
}

/** Delivery and registration ids are UUIDs; anything else is simply not found. */
export const isUuid = (s: string) =>
  /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s);

/** The host (and port) of a URL for summaries and logs; never the path, query or userinfo. */
export function hostOf(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return '?';
  }
}

/** Temporal refuses a fairness key longer than this many bytes. */
export const FAIRNESS_KEY_MAX_BYTES = 64;

/**
 * The tenant's Temporal fairness key: the tenant id itself when it fits in 64 UTF-8 bytes, else
 * `sha256:` + the base64url SHA-256 of the id (50 bytes). Pure and stable: every start of a tenant's
 * workflows, in any process and version, lands in the same fairness bucket.
 */
export function fairnessKeyOf(tenantId: string): string {
  if (Buffer.byteLength(tenantId, 'utf8') <= FAIRNESS_KEY_MAX_BYTES) return tenantId;
  return `sha256:${crypto.createHash('sha256').update(tenantId, 'utf8').digest('base64url')}`;
}
