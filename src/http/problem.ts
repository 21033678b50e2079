import type { Response } from 'express';

export const PROBLEM_STATUS = {
  unauthorized: 401,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  validation: 400,
  guard_refused: 400,
  idempotency_mismatch: 422,
  rate_limited: 429,
  unavailable: 503,
} as const;
export type ProblemName = keyof typeof PROBLEM_STATUS;

const TITLES: Record<ProblemName, string> = {
  unauthorized: 'Unauthorized',
  not_found: 'Not found',
  method_not_allowed: 'Method not allowed',
  conflict: 'Conflict',
  payload_too_large: 'Payload too large',
  unsupported_media_type: 'Unsupported media type',
  validation: 'Invalid request',
  guard_refused: 'Address refused',
  idempotency_mismatch: 'Idempotency key reused',
  rate_limited: 'Too many requests',
  unavailable: 'Service unavailable',
};

export interface FieldError {
  path: string;
  message: string;
}

/** An RFC 9457 problem; thrown inside a transaction it also rolls the transaction back. */
export class Problem extends Error {
  constructor(
    readonly problem: ProblemName,
    readonly detail: string,
    readonly extra: { errors?: FieldError[]; rule?: string } = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(detail);
  }
  get status(): number {
    return PROBLEM_STATUS[this.problem];
  }
  body() {
    return {
      type: `urn:a2a-push:problem:${this.problem}`,
      title: TITLES[this.problem],
      status: this.status,
      detail: this.detail,
      ...this.extra,
    };
  }
}

export function sendProblem(res: Response, p: Problem): void {
  for (const [k, v] of Object.entries(p.headers)) res.setHeader(k, v);
  res.status(p.status).type('application/problem+json').send(JSON.stringify(p.body()));
}

export const validationProblem = (errors: FieldError[]) =>
  new Problem('validation', errors.map((e) => (e.path ? `${e.path}: ${e.message}` : e.message)).join('; '), {
    errors,
  });
