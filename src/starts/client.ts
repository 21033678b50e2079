import {
  Client,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  type WorkflowOptions,
} from '@temporalio/client';
import { WorkflowIdReusePolicy, type Duration } from '@temporalio/common';
import type { NativeConnection } from '@temporalio/worker';
import { clientInterceptors } from '../temporal';
import { fairnessKeyOf, hostOf, makeDeliveryWorkflowId, makeRegistrationWorkflowId } from '../ids';
import type { DueJob } from '../delivery/types';
import type { DeliveryInput } from '../workflows/delivery';
import { ConfigId, DeliveryStatus, RegistrationId, TaskId, TenantId } from '../workflows/search-attributes';
import { callbackSignal, deleteSignal, remoteTaskSignal, wakeSignal } from '../workflows/signals';
import type { Lane } from './admission';

/**
 * The only caller of Temporal's start and signal APIs: delivery and registration workflows start here,
 * and running ones are woken here.
 */

/**
 * Both delivery workflow types stay registered (runs of either finish as the type they started as);
 * new deliveries start as the lean one: its fast-lane attempt is a local activity (a first-try
 * delivery is 7 history events, the classic type's 12).
 */
export const DELIVERY_WORKFLOW_TYPES = {
  classic: 'deliveryWorkflow',
  lean: 'deliveryWorkflowLean',
} as const;
export const DELIVERY_WORKFLOW_TYPE = DELIVERY_WORKFLOW_TYPES.lean;

/**
 * The lean type's workflow task timeout: its fast-lane attempt runs inside a workflow task (a local
 * activity) with no heartbeat of its own, so this is how soon a killed worker is noticed (as the classic
 * activity's heartbeat timeout). The SDK heartbeats a longer task at 80 % (16 s).
 */
export const LEAN_WORKFLOW_TASK_TIMEOUT: Duration = '20 seconds';

/**
 * Eager starts in flight per tenant (src/starts/eager.ts): `take` a job's place before asking for an
 * eager start (false: its tenant has its share in flight, start through the task queue), `done` when
 * the start was not eager after all.
 */
export interface EagerBudget {
  take(jobId: string, tenantId: string): boolean;
  done(jobId: string): void;
}

/** Where delivery workflows start. */
export interface Starter {
  client: Client;
  taskQueue: string;
  /** The attempt plan (settings in words), shown in every delivery workflow's static details. */
  plan?: string | undefined;
  /**
   * Set where a worker of `taskQueue` runs in this process on `client`'s NativeConnection: a fast-lane
   * start asks to be eager (its first workflow task comes back in the answer, to that worker, with no
   * trip through matching), within its tenant's places.
   */
  eager?: EagerBudget | undefined;
}

/** The options of a job's workflow start. The input carries ids only. */
function deliveryStartOptions(
  s: Starter,
  job: DueJob,
  lane: Lane,
  host: string,
): WorkflowOptions & { args: [DeliveryInput] } {
  return {
    workflowId: makeDeliveryWorkflowId(job.id),
    taskQueue: s.taskQueue,
    workflowTaskTimeout: LEAN_WORKFLOW_TASK_TIMEOUT,
    args: [{ jobId: job.id, ...(lane === 'slow' ? { lane: 'slow' } : {}) }],
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
    staticSummary: `push task ${job.taskId} → host ${host}`,
    staticDetails:
      `task ${job.taskId}, config ${job.configId}, target host ${host}` + (s.plan ? `\n\n${s.plan}` : ''),
  };
}

/**
 * Starts a due job's workflow. `eager` (its first task came back to this process's worker), `started`
 * (through the task queue: not asked, or the server or the worker's slots refused eager), or `exists`
 * (started before, by another relay or before a crash). Other failures throw.
 */
export async function startDelivery(
  s: Starter,
  job: DueJob,
  lane: Lane,
): Promise<'eager' | 'started' | 'exists'> {
  const options = deliveryStartOptions(s, job, lane, hostOf(job.url));
  // A fast-lane first task runs its attempt here: within the tenant's places, past them through the
  // task queue, ordered fairly. A slow-lane first task only schedules an activity.
  const eager = s.eager !== undefined && lane === 'fast' && s.eager.take(job.id, job.tenantId);
  try {
    const handle = await s.client.workflow.start(DELIVERY_WORKFLOW_TYPE, {
      ...options,
      ...(eager ? { requestEagerStart: true } : {}),
    });
    if (eager && !handle.eagerlyStarted) s.eager!.done(job.id);
    return handle.eagerlyStarted ? 'eager' : 'started';
  } catch (err) {
    if (eager) s.eager!.done(job.id);
    if (err instanceof WorkflowExecutionAlreadyStartedError) return 'exists';
    throw err;
  }
}

/**
 * Runs of the previous version that started before their job was due (held in their start delay, or
 * waiting for a wake after an answer `waitingFor`): now that it is due, a signal-with-start wakes them
 * (a plain signal would wait for the start delay). A closed run is left alone. Best effort: their
 * recheck repairs a lost one. To be removed with the previous version's runs.
 */
export async function wakeLegacyRuns(s: Starter, jobs: DueJob[]): Promise<void> {
  await Promise.all(
    jobs.map((job) =>
      s.client.workflow
        .signalWithStart(DELIVERY_WORKFLOW_TYPE, {
          ...deliveryStartOptions(s, job, 'fast', hostOf(job.url)),
          signal: wakeSignal,
          signalArgs: [],
        })
        .catch(() => undefined),
    ),
  );
}

/**
 * Wakes running delivery workflows: a slot at their target was granted to them, their job was
 * superseded, their config deleted or stopped, or a new event asks their head for an early attempt.
 * Best effort: a lost wake is repaired by the workflow's own timer and the activity's checks.
 */
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

/**
 * A client for eager starts: on the NativeConnection of a worker running in this process (eager start
 * needs one shared between client and worker), with the same interceptors as every other client.
 */
export function eagerStartClient(connection: NativeConnection, namespace: string): Client {
  return new Client({ connection, namespace, interceptors: { workflow: clientInterceptors() } });
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
