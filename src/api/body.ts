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

export const hasBody = (req: Request) => Buffer.isBuffer(req.body) && req.body.length > 0;

/** The JSON text of the body: 415 unless a JSON media type, 400 unless it parses. */
export function jsonText(req: Request): { text: string; value: unknown } | undefined {
  if (!hasBody(req)) return undefined;
  if (!isJsonMediaType(req.headers['content-type']))
    throw new Problem('unsupported_media_type', 'the body must be application/json or application/a2a+json');
  const text = (req.body as Buffer).toString('utf8');
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
