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
