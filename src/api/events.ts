import { Router } from 'express';
import { writeEvent } from '../db/outbox';
import { rawMemberText } from '../json-span';
import { eventWrites } from '../metrics';
import { validateStreamResponse } from '../stream-response';
import { currentTraceparent, inSpan } from '../tracing';
import { handle, parseBody, rawBody } from './body';
import { pathId } from './configs';
import { callerOf, writeOneStatement, type ApiDeps } from './context';
import { validationProblem } from './problem';
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
        // Idle: this process starts the jobs itself once the write commits; busy: the claim run does.
        const leaseMs = deps.dispatcher.directLease(tenantId);
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
                ...(leaseMs !== undefined ? { leaseMs } : {}),
                ...(traceparent ? { traceparent } : {}),
                ordered: deps.settings.DELIVERY_ORDER === 'per_config',
              });
              set({ 'a2a_push.event_id': written.eventId, 'a2a_push.deliveries': written.starts.length });
              return written;
            },
          );
          return {
            status: 202,
            body: { eventId: w.eventId, deliveries: w.starts.map(({ id, configId }) => ({ id, configId })) },
            after: () => {
              eventWrites.inc();
              if (w.starts.length > 0)
                if (leaseMs !== undefined) deps.dispatcher.startNow(tenantId, taskId, w.starts, traceparent);
                else deps.dispatcher.kick();
              const wake = [...w.superseded, ...w.woken];
              if (wake.length > 0) void deps.dispatcher.wake(wake);
            },
          };
        });
      }),
    )
    .all(allow('POST'));
  return r;
}
