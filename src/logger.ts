import pino, { type Logger } from 'pino';
import { traceLogFields, tracingActive } from './tracing';

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

/** Made after startTracing (the entry points do): with tracing on, lines inside a span carry its ids. */
export function createLogger(level: string, name: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      name,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      ...(tracingActive() ? { mixin: traceLogFields } : {}),
    },
    destination,
  );
}
