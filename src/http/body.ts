import { isUtf8 } from 'node:buffer';
import express, { type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { Problem, validationProblem, type FieldError } from './problem';

export const BODY_LIMIT = 1024 * 1024;

/** Reads any body as bytes (up to 1 MiB; over it the error handler answers 413) before media type and JSON. */
export const rawBody = express.raw({ type: () => true, limit: BODY_LIMIT });

const JSON_TYPES = new Set(['application/json', 'application/a2a+json']);

export function isJsonMediaType(contentType: string | undefined): boolean {
  if (!contentType) return false;
  return JSON_TYPES.has(contentType.split(';')[0]!.trim().toLowerCase());
}

/** The Encoding Standard's labels for UTF-8 that clients send in practice. */
const UTF8_LABELS = new Set(['utf-8', 'utf8']);
/** One media-type parameter (RFC 9110 §5.6.6): a token name and a token or quoted-string value. */
const PARAMETER = /;\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)/g;

/** The `charset` parameters of a Content-Type, unquoted (usually none or one). */
export function charsetsOf(contentType: string): string[] {
  const found: string[] = [];
  for (const [, name, value] of contentType.matchAll(PARAMETER))
    if (name!.toLowerCase() === 'charset')
      found.push(value!.startsWith('"') ? value!.slice(1, -1).replace(/\\(.)/g, '$1') : value!.trim());
  return found;
}

/**
 * Why a JSON body's `charset` parameter is refused with 415, or undefined when there is none or it names
 * UTF-8: JSON is UTF-8 (RFC 8259 §8.1), so no other charset is decoded.
 */
export function charsetRefusal(contentType: string | undefined): string | undefined {
  const other = charsetsOf(contentType ?? '').find((c) => !UTF8_LABELS.has(c.toLowerCase()));
  return other === undefined
    ? undefined
    : `the body must be UTF-8; charset ${JSON.stringify(other.slice(0, 64))} is not supported`;
}

export const hasBody = (req: Request) => Buffer.isBuffer(req.body) && req.body.length > 0;

/**
 * The body as text, or undefined when its bytes are not UTF-8 (then `notUtf8Problem`). A lossy decode
 * would turn them into U+FFFD and store, and push, bytes the client never sent. A BOM is kept as
 * U+FEFF, which JSON.parse refuses, as before.
 */
export const utf8Text = (body: Buffer): string | undefined =>
  isUtf8(body) ? body.toString('utf8') : undefined;

/** The 400 for a body that is not UTF-8: a validation problem whose error names the whole body (path ''). */
export const notUtf8Problem = () => validationProblem([{ path: '', message: 'the body is not valid UTF-8' }]);

/** The JSON text of the body: 415 unless a JSON media type in UTF-8, 400 unless UTF-8 that parses. */
export function jsonText(req: Request): { text: string; value: unknown } | undefined {
  if (!hasBody(req)) return undefined;
  const contentType = req.headers['content-type'];
  if (!isJsonMediaType(contentType))
    throw new Problem('unsupported_media_type', 'the body must be application/json or application/a2a+json');
  const charset = charsetRefusal(contentType);
  if (charset) throw new Problem('unsupported_media_type', charset);
  const text = utf8Text(req.body as Buffer);
  if (text === undefined) throw notUtf8Problem();
  try {
    return { text, value: JSON.parse(text) };
  } catch (err) {
    throw validationProblem([{ path: '', message: `the body is not valid JSON: ${(err as Error).message}` }]);
  }
}

export function zodErrors(error: z.ZodError, prefix = ''): FieldError[] {
  return error.issues
    .map((i) => {
      // An unknown key is reported on the key itself, so its path names the field.
      const keys = i.code === 'unrecognized_keys' ? (i as { keys: string[] }).keys : [undefined];
      return keys.map((k) => ({
        path: [prefix, ...i.path.map(String), ...(k !== undefined ? [k] : [])].filter(Boolean).join('.'),
        message: i.code === 'unrecognized_keys' ? 'is not a known field' : i.message,
      }));
    })
    .flat();
}

/** Parses the body with a zod schema; a missing body is validated as {}. */
export function parseBody<T extends z.ZodType>(
  req: Request,
  schema: T,
): { data: z.output<T>; value: unknown; text?: string } {
  const json = jsonText(req);
  const parsed = schema.safeParse(json === undefined ? {} : json.value);
  if (!parsed.success) throw validationProblem(zodErrors(parsed.error));
  return json === undefined
    ? { data: parsed.data, value: null }
    : { data: parsed.data, value: json.value, text: json.text };
}

export function parseQuery<T extends z.ZodType>(req: Request, schema: T): z.output<T> {
  const parsed = schema.safeParse(req.query);
  if (!parsed.success) throw validationProblem(zodErrors(parsed.error));
  return parsed.data;
}

/** Express 5 passes rejected promises to the error handler; this keeps handlers to plain async functions. */
export const handle =
  (fn: (req: Request, res: Response) => Promise<void>) => (req: Request, res: Response, next: NextFunction) =>
    fn(req, res).catch(next);
