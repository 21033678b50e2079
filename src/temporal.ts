import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  type WorkflowOptions,
} from '@temporalio/client';
import { WorkflowIdReusePolicy, type Duration } from '@temporalio/common';
import type { NativeConnection } from '@temporalio/worker';
import { DEFAULT_DELIVERY_WORKFLOW } from './config';
import { requestIdClientInterceptor } from './request-context';
import { temporalClientInterceptors } from './tracing';
import { fairnessKeyOf, hostOf, makeDeliveryWorkflowId, makeRegistrationWorkflowId } from './ids';
import type { DeliveryInput } from './workflows/delivery';
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
   * workflow's start is delayed until that one's end wakes it (BEHIND_START_DELAY_MS).
   */
  behind?: string;
  /** With `behind`: the job's deadline (epoch ms): the start delay ends by then. */
  deadlineAt?: number;
  /**
   * `slow`: its target has not answered a 2xx lately or is suspect (the dispatcher's hint, src/api/
   * known-targets.ts): the first attempt goes to the slow lane at once instead of asking the fast lane
   * first. The dispatcher never sets it with `behind` (by its turn, the job ahead has told the
   * target's health).
   */
  lane?: 'slow';
  /**
   * The outbox had no start of its workflow on record when this was read (`dispatched_at` unset): a
   * wake may then start it eagerly rather than signal it (`wakeOrStartDeliveries`).
   */
  undispatched?: boolean;
  /** The job whose end woke this one: its eager place, if it held one, passes to this job. */
  wokenBy?: string;
}

/**
 * Eager starts in flight per tenant (src/worker/eager-starts.ts): `take` a job's place before asking for
 * an eager start (false: its tenant has its share in flight, start through the task queue), `done` when
 * the start was not eager after all.
 */
export interface EagerBudget {
  take(jobId: string, tenantId: string, from?: string): boolean;
  done(jobId: string): void;
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
export const LEAN_WORKFLOW_TASK_TIMEOUT: Duration = '20 seconds';

/**
 * How long the start of a job written `behind` another is delayed (Temporal's start delay): until the
 * job ahead ends, whose wake (a signal-with-start, `wakeOrStartDeliveries`) ends the delay at once; at
 * most 5 min (a wake lost to a crash: the run then asks the activity, which decides), never past the
 * job's deadline (+1 s, so that the activity sees it passed and ends the job `expired`). As the
 * recheck of a held job whose job ahead is not on the wire (src/activities/delivery.ts, ORDER_RECHECK_MS).
 */
export const BEHIND_START_DELAY_MS = 5 * 60_000;

/** The start delay of a job (undefined: none): see BEHIND_START_DELAY_MS. */
export function startDelayOf(
  job: Pick<JobToStart, 'behind' | 'deadlineAt'>,
  now = Date.now(),
): number | undefined {
  if (!job.behind) return undefined;
  const ms = Math.min(
    BEHIND_START_DELAY_MS,
    job.deadlineAt !== undefined ? job.deadlineAt - now + 1_000 : BEHIND_START_DELAY_MS,
  );
  return ms >= 1_000 ? Math.ceil(ms) : undefined;
}

/** Where delivery workflows start, and as what: what a start and a wake-or-start both need. */
export interface DeliveryStarter {
  client: Client;
  taskQueue: string;
  kind: DeliveryWorkflowKind;
  /** The attempt plan (settings in words), shown in every delivery workflow's static details. */
  plan?: string | undefined;
  /**
   * Set where a worker of `taskQueue` runs on `client`'s NativeConnection (EAGER_START=on): a woken job
   * whose workflow is not started yet starts eagerly, within its tenant's places.
   */
  eager?: EagerBudget;
  /**
   * Told how each job its wake reached was woken: `eager` (not started yet, started eagerly), `started`
   * (not started yet, started through the task queue: the server or the worker's slots refused eager),
   * `tenant_full` (not started yet, its tenant's eager places full: a signal-with-start), `signal` (a
   * signal-with-start of a job that had its workflow, or without eager starts). For the worker's metrics.
   */
  onWake?: (how: 'eager' | 'started' | 'tenant_full' | 'signal') => void;
}

/**
 * The options of a job's workflow start (a start, or the start half of a signal-with-start). The input
 * carries ids only. A job written `behind` another starts delayed (no workflow task, so no worker time,
 * until its turn) with no `behind` in its input: its first workflow task calls the activity, which
 * decides, exactly as a run started before the job ahead existed.
 */
function deliveryStartOptions(
  taskQueue: string,
  job: JobToStart,
  kind: DeliveryWorkflowKind,
): WorkflowOptions & { args: [DeliveryInput] } {
  // Undefined unless the job is `behind` another (and its deadline is not past).
  const delay = startDelayOf(job);
  return {
    workflowId: makeDeliveryWorkflowId(job.id),
    taskQueue,
    ...(delay !== undefined ? { startDelay: delay } : {}),
    ...(kind === 'lean' ? { workflowTaskTimeout: LEAN_WORKFLOW_TASK_TIMEOUT } : {}),
    args: [{ jobId: job.id, ...(job.lane ? { lane: job.lane } : {}) }],
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
    staticDetails:
      `task ${job.taskId}, config ${job.configId}, target host ${job.host}` +
      (delay !== undefined
        ? `\n\nwritten behind delivery ${job.behind} (an earlier event of this config): starts when that one ends`
        : '') +
      (job.plan ? `\n\n${job.plan}` : ''),
  };
}

/**
 * Starts a job's workflow; a workflow that already exists (started before a crash, or by a wake)
 * counts as started. `eager`: ask for eager start (the client must be on the NativeConnection of a
 * worker of `taskQueue` in this process): the server writes the start and the first workflow task in
 * one update and hands that task back in the answer, to the local worker, with no trip through
 * matching. Without a free workflow task slot the SDK asks for a normal start, silently; a delayed
 * start (a job `behind` another) is never eager. Resolves true when the start was eager.
 */
export async function startDeliveryWorkflow(
  client: Client,
  taskQueue: string,
  job: JobToStart,
  kind: DeliveryWorkflowKind = DEFAULT_DELIVERY_WORKFLOW,
  eager = false,
  budget?: EagerBudget,
): Promise<boolean> {
  const options = deliveryStartOptions(taskQueue, job, kind);
  // A lean fast-lane run's first task runs its attempt here: within the tenant's eager places (when
  // bounded), past them through the task queue, fairly. Classic and slow-lane first tasks only schedule
  // an activity: eager without a place, as before the places.
  const bounded = budget !== undefined && kind === 'lean' && job.lane !== 'slow';
  const askEager = eager && !('startDelay' in options) && (!bounded || budget.take(job.id, job.tenantId));
  const started = await startRun(client, kind, options, askEager, bounded && askEager ? budget : undefined);
  return started === 'eager';
}

/**
 * One workflow start, asking for an eager one when `eager`: `eager` (its first task came back to this
 * process's worker), `started` (through the task queue: the server or the worker's slots refused eager),
 * or `exists` (WorkflowExecutionAlreadyStartedError). `place`: the tenant's eager place the job took for
 * this start; given back unless the start was eager (then the job's first attempt call gives it back).
 * Other failures throw, the place given back.
 */
async function startRun(
  client: Client,
  kind: DeliveryWorkflowKind,
  options: WorkflowOptions & { args: [DeliveryInput] },
  eager: boolean,
  place: EagerBudget | undefined,
): Promise<'eager' | 'started' | 'exists'> {
  const jobId = options.args[0].jobId;
  try {
    const handle = await client.workflow.start(DELIVERY_WORKFLOW_TYPES[kind], {
      ...options,
      ...(eager ? { requestEagerStart: true } : {}),
    });
    if (!handle.eagerlyStarted) place?.done(jobId);
    return handle.eagerlyStarted ? 'eager' : 'started';
  } catch (err) {
    place?.done(jobId);
    if (err instanceof WorkflowExecutionAlreadyStartedError) return 'exists';
    throw err;
  }
}

/** A woken job starts now (no delay), with the plan in its details. */
function withoutBehind(
  { behind: _behind, deadlineAt: _deadline, ...job }: JobToStart,
  plan?: string,
): JobToStart {
  return { ...job, ...(plan ? { plan } : {}) };
}

/**
 * Wakes jobs' workflows with a signal-with-start: a running run gets `wake`; a run in its start delay
 * (a held job) starts its first workflow task at once (a plain signal would wait for the delay); a
 * job whose workflow is not started yet (held back by HELD_START_RATE, or its start not come yet)
 * starts now, with its wake; a closed run is left alone (REJECT_DUPLICATE refuses). Returns the ids
 * whose workflow has started (woken, started, or closed), for the caller to mark dispatched
 * (`markDispatched`), so that no claim run starts them again. Best effort, never throws: a lost wake is
 * repaired by the start delay's end or the job's turn, the workflow's own timers and the activity's checks.
 */
export async function wakeOrStartDeliveries(s: DeliveryStarter, jobs: JobToStart[]): Promise<string[]> {
  const woken = await Promise.all(
    jobs.map(async (job) => {
      const options = deliveryStartOptions(s.taskQueue, withoutBehind(job, s.plan), s.kind);
      // Not started yet (the usual case for a held job: HELD_START_RATE kept it in the outbox), under
      // lean: an eager start, whose first task (its attempt, a local activity) comes back to this worker
      // in the answer, with no trip through matching. It needs no wake: its first attempt reads the
      // line, whose job ahead has ended. Within its tenant's eager places, taking over the place of the
      // job whose end woke it.
      const eligible = s.eager !== undefined && job.undispatched === true && s.kind === 'lean';
      let how: 'tenant_full' | 'signal' = eligible ? 'tenant_full' : 'signal';
      if (eligible && s.eager!.take(job.id, job.tenantId, job.wokenBy)) {
        how = 'signal';
        // `exists` (started meanwhile, by the claim run, say: it may wait in its start delay or for a
        // wake) or a failed start: the signal-with-start below wakes or starts it, as without eager starts.
        const started = await startRun(s.client, s.kind, options, true, s.eager).catch(
          () => 'failed' as const,
        );
        if (started === 'eager' || started === 'started') {
          s.onWake?.(started);
          return job.id;
        }
      }
      return s.client.workflow
        .signalWithStart(DELIVERY_WORKFLOW_TYPES[s.kind], { ...options, signal: wakeSignal, signalArgs: [] })
        .then(
          () => {
            s.onWake?.(how);
            return job.id;
          },
          // Closed: it has started (and ended) all the same.
          (err: unknown) => (err instanceof WorkflowExecutionAlreadyStartedError ? job.id : undefined),
        );
    }),
  );
  return woken.filter((id): id is string => id !== undefined);
}

/**
 * A client for eager starts: on the NativeConnection of a worker running in this process (eager start
 * needs one shared between client and worker), with the same interceptors as every other client.
 */
export function eagerStartClient(connection: NativeConnection, namespace: string): Client {
  return new Client({ connection, namespace, interceptors: { workflow: clientInterceptors() } });
}

/**
 * Wakes running delivery workflows (a slot at their target was granted to them: they are in its line,
 * so past their first workflow task). Best effort: a lost wake is repaired by the workflow's own timer
 * and the activity's checks. A job that may be held in its start delay needs wakeOrStartDeliveries.
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
