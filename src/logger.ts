import pino, { type Logger } from 'pino';
import { traceLogFields } from './tracing';

/** Paths pino blanks out wherever they appear in a log line. */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["x-a2a-notification-token"]',
  'req.headers["idempotency-key"]',
  'headers.authorization',
  'authorization',
  '*.authorization',
  'credentials',
  '*.credentials',
  '*.*.credentials',
  'token',
  '*.token',
  '*.*.token',
  'bearerToken',
  '*.bearerToken',
  'apiKey',
  '*.apiKey',
];

export function createLogger(level: string, name: string, destination?: pino.DestinationStream): Logger {
  // Inside a span (tracing on), every line carries its trace and span id.
  return pino(
    { level, name, redact: { paths: REDACT_PATHS, censor: '[redacted]' }, mixin: traceLogFields },
    destination,
  );
}
