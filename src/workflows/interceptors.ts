import {
  type Next,
  type WorkflowExecuteInput,
  type WorkflowInboundCallsInterceptor,
  type WorkflowInterceptors,
  type WorkflowOutboundCallsInterceptor,
  type ActivityInput,
  type LocalActivityInput,
  type SignalInput,
  type GetLogAttributesInput,
  type ContinueAsNewInput,
} from '@temporalio/workflow';

// The request id header (src/request-context.ts): kept in the workflow, passed to every activity it
// schedules and to a continued run, and added to the workflow's own log lines.
const HEADER = 'a2a-push-request-id';

export const interceptors = (): WorkflowInterceptors => {
  let requestId: import('@temporalio/common').Payload | undefined;
  const inbound: WorkflowInboundCallsInterceptor = {
    execute(input: WorkflowExecuteInput, next: Next<WorkflowInboundCallsInterceptor, 'execute'>) {
      requestId = input.headers[HEADER] ?? requestId;
      return next(input);
    },
    handleSignal(input: SignalInput, next: Next<WorkflowInboundCallsInterceptor, 'handleSignal'>) {
      // The newest request that woke the workflow is the one its next activity serves.
      requestId = input.headers[HEADER] ?? requestId;
      return next(input);
    },
  };
  const outbound: WorkflowOutboundCallsInterceptor = {
    scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>) {
      return next(requestId ? { ...input, headers: { ...input.headers, [HEADER]: requestId } } : input);
    },
    // The lean type's attempts are local activities: their log lines carry the request id too.
    scheduleLocalActivity(
      input: LocalActivityInput,
      next: Next<WorkflowOutboundCallsInterceptor, 'scheduleLocalActivity'>,
    ) {
      return next(requestId ? { ...input, headers: { ...input.headers, [HEADER]: requestId } } : input);
    },
    continueAsNew(input: ContinueAsNewInput, next: Next<WorkflowOutboundCallsInterceptor, 'continueAsNew'>) {
      return next(requestId ? { ...input, headers: { ...input.headers, [HEADER]: requestId } } : input);
    },
    getLogAttributes(
      input: GetLogAttributesInput,
      next: Next<WorkflowOutboundCallsInterceptor, 'getLogAttributes'>,
    ) {
      const data = requestId?.data;
      return next(
        data ? { ...input, requestId: JSON.parse(new TextDecoder().decode(data)) as string } : input,
      );
    },
  };
  return { inbound: [inbound], outbound: [outbound] };
};
