import { Client, Connection } from '@temporalio/client';
import { requestIdClientInterceptor } from './request-context';
import { temporalClientInterceptors } from './tracing';

/** The connection to Temporal and its readiness; what is started on it lives in src/starts/client.ts. */

export interface TemporalSettings {
  address: string;
  namespace: string;
  taskQueue: string;
}

/**
 * The client interceptors of every Temporal client: the request id, and (tracing on) Temporal's
 * OpenTelemetry interceptor, which makes the StartWorkflow/SignalWorkflow spans and carries the trace
 * context into the workflow in a header.
 */
export const clientInterceptors = () => [requestIdClientInterceptor, ...temporalClientInterceptors()];

/** A lazy connection: the API starts (and answers 202) while Temporal is away; the relay catches up. */
export function connectTemporal(s: TemporalSettings): { client: Client; connection: Connection } {
  const connection = Connection.lazy({ address: s.address });
  return {
    client: new Client({
      connection,
      namespace: s.namespace,
      interceptors: { workflow: clientInterceptors() },
    }),
    connection,
  };
}

/** What a readiness check needs of a client `Connection` or a worker's `NativeConnection`. */
export interface ReachableConnection {
  workflowService: { getSystemInfo(req: object): Promise<unknown> };
  withDeadline<R>(deadline: number | Date, fn: () => Promise<R>): Promise<R>;
}

/**
 * For /readyz: true when the Temporal frontend answers within 2 s. Without the deadline the client's
 * own retries of an unreachable server made one check take about 19 s.
 */
export async function temporalReachable(connection: ReachableConnection): Promise<boolean> {
  try {
    await connection.withDeadline(Date.now() + 2_000, () => connection.workflowService.getSystemInfo({}));
    return true;
  } catch {
    return false;
  }
}
