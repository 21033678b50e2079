import type { Request, Response } from 'express';
import { Problem, sendProblem } from '../http/problem';

/** The answer for a known path with a method it does not take: 405 with Allow. */
export const allow =
  (...methods: string[]) =>
  (req: Request, res: Response) => {
    const list = methods.join(', ');
    sendProblem(
      res,
      new Problem(
        'method_not_allowed',
        `${req.method} is not allowed here; allowed: ${list}`,
        {},
        { Allow: list },
      ),
    );
  };
