import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
} from '@temporalio/client';
import { WorkflowIdReusePolicy } from '@temporalio/common';
import type { NativeConnection } from '@temporalio/worker';
import { requestIdClientInterceptor } from './request-context';
import { temporalClientInterceptors } from './tracing';
import { fairnessKeyOf, hostOf, makeDeliveryWorkflowId, makeRegistrationWorkflowId } from './ids';
import { ConfigId, DeliveryStatus, RegistrationId, TaskId, TenantId } from './workflows/search-attributes';
import { callbackSignal, deleteSignal, remoteTaskSignal, wakeSignal } from './workflows/signals';

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

/** A lazy connection: the API starts (and answers 202) while Temporal is away; the dispatcher catches up. */
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

export interface JobToStart {
  id: string;
  tenantId: string;
  taskId: string;
  configId: string;
  host: string;
  /** The attempt plan (settings in words): shown as the workflow's static details. */
  plan?: string;
  /**
   * The unfinished earlier job of its config it was written behind (DELIVERY_ORDER=per_config): the
   * workflow waits for that one's end (a wake) before its first attempt call.
   */
  behind?: string;
  /** With `behind`: the job's deadline (epoch ms): the wait for the wake ends by then. */
  deadlineAt?: number;
  /**
   * `slow`: its target has not answered a 2xx lately or is suspect (the dispatcher's hint, src/api/
   * known-targets.ts): the first attempt goes to the slow lane at once instead of asking the fast lane
   * first. The dispatcher never sets it with `behind` (by its turn, the job ahead has told the
   * target's health).
   */
  lane?: 'slow';
}

/** DELIVERY_WORKFLOW: which delivery workflow type new jobs start as. */
export type DeliveryWorkflowKind = 'classic' | 'lean';

export const DELIVERY_WORKFLOW_TYPES: Record<DeliveryWorkflowKind, string> = {
  classic: 'deliveryWorkflow',
  lean: 'deliveryWorkflowLean',
};

/**
 * The lean type's workflow task timeout: its fast-lane attempt runs inside a workflow task (a local
 * activity) with no heartbeat of its own, so this is how soon a killed worker is noticed (today's
 * activity heartbeat timeout is 20 s too). The SDK heartbeats a longer task at 80 % (16 s).
 */
export const LEAN_WORKFLOW_TASK_TIMEOUT = '20 seconds';

/**
 * Starts a job's workflow; a workflow that already exists (started before a crash) counts as started.
 * `eager`: ask for eager start (the client must be on the NativeConnection of a worker of `taskQueue`
 * in this process): the server writes the start and the first workflow task in one update and hands
 * that task back in the answer, to the local worker, with no trip through matching. Without a free
 * workflow task slot the SDK asks for a normal start, silently. Resolves true when the start was eager.
 */
export async function startDeliveryWorkflow(
  client: Client,
  taskQueue: string,
  job: JobToStart,
  kind: DeliveryWorkflowKind = 'classic',
  eager = false,
): Promise<boolean> {
  try {
    const handle = await client.workflow.start(DELIVERY_WORKFLOW_TYPES[kind], {
      workflowId: makeDeliveryWorkflowId(job.id),
      taskQueue,
      ...(eager ? { requestEagerStart: true } : {}),
      ...(kind === 'lean' ? { workflowTaskTimeout: LEAN_WORKFLOW_TASK_TIMEOUT } : {}),
      args: [
        {
          jobId: job.id,
          ...(job.behind ? { behind: job.behind, ...(job.deadlineAt ? { until: job.deadlineAt } : {}) } : {}),
          ...(job.lane ? { lane: job.lane } : {}),
        },
      ],
      workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
      // The tenant's fairness key: its workflow and activity tasks (activities inherit the
      // workflow's priority) take turns with other tenants' in Temporal's queues.
      priority: { fairnessKey: fairnessKeyOf(job.tenantId) },
      typedSearchAttributes: [
        { key: TenantId, value: job.tenantId },
        { key: TaskId, value: job.taskId },
        { key: ConfigId, value: job.configId },
        { key: DeliveryStatus, value: 'queued' },
      ],
      staticSummary: `push task ${job.taskId} → host ${job.host}`,
      staticDetails: `task ${job.taskId}, config ${job.configId}, target host ${job.host}${job.plan ? `\n\n${job.plan}` : ''}`,
    });
    return handle.eagerlyStarted;
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) return false;
    throw err;
  }
}

/**
 * A client for eager starts: on the NativeConnection of a worker running in this process (eager start
 * needs one shared between client and worker), with the same interceptors as every other client.
 */
export function eagerStartClient(connection: NativeConnection, namespace: string): Client {
  return new Client({ connection, namespace, interceptors: { workflow: clientInterceptors() } });
}

/** Best effort: a lost wake is repaired by the workflow's own timer and the activity's checks. */
export async function wakeDeliveries(client: Client, jobIds: string[]): Promise<void> {
  await Promise.all(
    jobIds.map((id) =>
      client.workflow
        .getHandle(makeDeliveryWorkflowId(id))
        .signal(wakeSignal)
        .catch((err: unknown) => {
          if (!(err instanceof WorkflowNotFoundError)) throw err;
        }),
    ),
  ).catch(() => undefined);
}

/** The registration columns a workflow start needs (ids and the agent's host: nothing secret). */
export interface RegistrationToStart {
  id: string;
  tenant_id: string;
  agent_url: string;
  remote_task_id: string | null;
}

const SIGNALS = { callback: callbackSignal, remoteTask: remoteTaskSignal } as const;

/**
 * Signals `registration-{id}`, starting it when it is not running. A run started for a registration that
 * already ended finds that out in its first activity and ends at once.
 */
export async function signalRegistration(
  client: Client,
  taskQueue: string,
  reg: RegistrationToStart,
  signal: keyof typeof SIGNALS = 'callback',
): Promise<void> {
  await client.workflow.signalWithStart('registrationWorkflow', {
    workflowId: makeRegistrationWorkflowId(reg.id),
    taskQueue,
    args: [{ registrationId: reg.id }],
    signal: SIGNALS[signal],
    signalArgs: [],
    priority: { fairnessKey: fairnessKeyOf(reg.tenant_id) },
    typedSearchAttributes: [
      { key: TenantId, value: reg.tenant_id },
      { key: RegistrationId, value: reg.id },
      ...(reg.remote_task_id ? [{ key: TaskId, value: reg.remote_task_id }] : []),
    ],
    staticSummary: `await remote task at host ${hostOf(reg.agent_url)}`,
    staticDetails: `registration ${reg.id}, agent host ${hostOf(reg.agent_url)}${reg.remote_task_id ? `, remote task ${reg.remote_task_id}` : ', remote task id not yet known'}`,
  });
}

/** Best effort: a registration whose workflow is not running needs nothing more. */
export async function signalRegistrationDeleted(client: Client, id: string): Promise<void> {
  await client.workflow
    .getHandle(makeRegistrationWorkflowId(id))
    .signal(deleteSignal)
    .catch(() => undefined);
}
