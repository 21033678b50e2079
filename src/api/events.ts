import { Router } from 'express';
import { writeEvent } from '../db/outbox';
import { rawMemberText } from '../json-span';
import { eventWrites } from '../metrics';
import { validateStreamResponse } from '../stream-response';
import { currentTraceparent, inSpan } from '../tracing';
import { handle, parseBody, rawBody } from '../http/body';
import { pathId } from './configs';
import { callerOf, writeOneStatement, type ApiDeps } from './context';
import { validationProblem } from '../http/problem';
import { allow } from './routing';
import { eventBody } from './schemas';

export function eventRoutes(deps: ApiDeps): Router {
  const r = Router();
  r.route('/v1/tasks/:taskId/events')
    .post(
      rawBody,
      handle(async (req, res) => {
        const taskId = pathId(req.params.taskId, 'taskId');
        const { data, value, text } = parseBody(req, eventBody);
        const v = validateStreamResponse(data.streamResponse, 'streamResponse');
        if (!v.ok) throw validationProblem(v.errors);
        if (v.taskId !== undefined && v.taskId !== taskId)
          throw validationProblem([
            {
              path: `streamResponse.${v.kind}.${v.kind === 'task' ? 'id' : 'taskId'}`,
              message: "must equal the path's taskId",
            },
          ]);
        // The push carries the value exactly as nr-llm sent it: same bytes, same key order.
        const body = rawMemberText(text!, 'streamResponse')!;
        const { tenantId } = callerOf(res);
        // Idle: this process's relay starts the jobs the write makes due; busy: any process's claim run.
        const leaseMs = deps.relay.leaseMs(tenantId);
        // The request's trace context (tracing on): the jobs keep it, and their workflow starts join it.
        const traceparent = currentTraceparent();
        await writeOneStatement(deps, req, res, value, async (q) => {
          const w = await inSpan(
            'event write',
            {
              attributes: { 'db.system': 'postgresql', 'a2a_push.task_id': taskId, 'a2a_push.kind': v.kind },
            },
            async (set) => {
              const written = await writeEvent(q, {
                tenantId,
                taskId,
                kind: v.kind,
                body,
                deadlineMs: deps.settings.DELIVERY_DEADLINE,
                boundPerConfig: deps.settings.OUTBOX_BOUND_PER_CONFIG,
                leaseMs,
                traceparent,
                ordered: deps.settings.DELIVERY_ORDER === 'per_config',
              });
              set({ 'a2a_push.event_id': written.eventId, 'a2a_push.deliveries': written.jobs.length });
              return written;
            },
          );
          return {
            status: 202,
            body: { eventId: w.eventId, deliveries: w.jobs.map(({ id, configId }) => ({ id, configId })) },
            after: () => {
              eventWrites.inc();
              // Leased to this process: started now (without a lease they were announced to every relay).
              if (leaseMs !== undefined) deps.relay.take(w.due);
              deps.relay.wake([...w.superseded, ...w.woken]);
            },
          };
        });
      }),
    )
    .all(allow('POST'));
  return r;
}
