import {
  allHandlersFinished,
  condition,
  log,
  patched,
  continueAsNew,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { RegistrationActivities } from '../activities/registration';
import {
  callbackSignal,
  deleteSignal,
  registrationStatusQuery,
  remoteTaskSignal,
  type RegistrationState,
} from './signals';
import { TaskId } from './search-attributes';

const acts = proxyActivities<RegistrationActivities>({
  // Agent calls are bounded at 15 s each (card + call); this covers both and the database around them.
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '5 minutes' },
});

/** The spacing of GetTask calls while callbacks keep arriving. */
const DRAIN_SPACING_MS = 1_000;

export interface RegistrationInput {
  registrationId: string;
  /** Carried over continue-as-new: the current poll interval, and whether a callback is waiting. */
  pollMs?: number;
  pending?: boolean;
}

export interface RegistrationResult {
  status: string;
  remoteState?: string;
  reason?: string;
}

/**
 * One workflow per registration: on a callback signal or a poll timer, one activity calls GetTask on
 * the remote agent and records what it saw. The callback body decides nothing.
 */
export async function registrationWorkflow(input: RegistrationInput): Promise<RegistrationResult> {
  const { registrationId } = input;
  let pending = input.pending ?? false;
  let taskKnownSignal = false;
  let deleted = false;
  const state: RegistrationState = { phase: 'starting', polls: 0 };
  setHandler(callbackSignal, () => {
    pending = true;
  });
  setHandler(remoteTaskSignal, () => {
    taskKnownSignal = true;
    pending = true;
  });
  setHandler(deleteSignal, () => {
    deleted = true;
  });
  setHandler(registrationStatusQuery, () => state);

  const end = async (r: RegistrationResult): Promise<RegistrationResult> => {
    log.info('registration ended', { registrationId, ...r });
    state.phase = 'ended';
    state.status = r.status;
    setCurrentDetails(
      `ended ${r.status}${r.remoteState ? ` (${r.remoteState})` : ''}${r.reason ? `: ${r.reason}` : ''}`,
    );
    return r;
  };

  const info = await acts.loadRegistration({ registrationId });
  if (info.status === 'deleted') await acts.removeRemotePushConfig({ registrationId });
  if (info.status !== 'pending' && info.status !== 'active') return end({ status: info.status });
  if (info.needsRemoteConfig) await acts.setupRemotePushConfig({ registrationId });

  // The Web UI finds the registration by the remote task id once it is known. The start sets it when
  // the id was known to the starter; a run whose starter saw none but whose first load does (the id
  // was posted in between) sets it here.
  const taskIdMissing = (id: string | undefined): id is string =>
    !!id && workflowInfo().typedSearchAttributes.get(TaskId) !== id;
  const showTaskId = (id: string | undefined) => {
    if (taskIdMissing(id)) upsertSearchAttributes([{ key: TaskId, value: id }]);
  };
  // Patched: runs started before this check replay without the upsert.
  if (taskIdMissing(info.remoteTaskId) && patched('task-id-at-start')) showTaskId(info.remoteTaskId);
  let remoteTaskKnown = info.remoteTaskKnown;
  let pollMs = input.pollMs ?? info.pollInitialMs;
  for (;;) {
    if (deleted) {
      await acts.removeRemotePushConfig({ registrationId });
      return end({ status: 'deleted' });
    }
    if (Date.now() >= info.expiresAt) {
      const r = await acts.expireRegistration({ registrationId });
      if (r.ended) await acts.removeRemotePushConfig({ registrationId });
      return end({ status: r.status, ...(r.reason ? { reason: r.reason } : {}) });
    }
    if (!remoteTaskKnown) {
      state.phase = 'awaiting_task_id';
      setCurrentDetails('waiting for nr-llm to post the remote task id');
      await condition(() => taskKnownSignal || deleted, info.expiresAt - Date.now(), {
        summary: 'waiting for the remote task id',
      });
      if (taskKnownSignal) {
        const now = await acts.loadRegistration({ registrationId });
        remoteTaskKnown = now.remoteTaskKnown;
        showTaskId(now.remoteTaskId);
      }
      continue;
    }

    state.phase = 'reconciling';
    pending = false;
    const r = await acts.reconcile.executeWithOptions({ summary: `GetTask (poll ${state.polls + 1})` }, [
      { registrationId },
    ]);
    state.polls++;
    if (r.remoteState) state.remoteState = r.remoteState;
    if (r.ended) {
      await acts.removeRemotePushConfig({ registrationId });
      return end({
        status: r.status,
        ...(r.remoteState ? { remoteState: r.remoteState } : {}),
        ...(r.reason ? { reason: r.reason } : {}),
      });
    }

    // Callbacks that arrived during the GetTask got no signal of their own (the inbox signals only a
    // registration's first unprocessed callback): drain them with another GetTask after a second, so a
    // stream of callbacks makes about one GetTask a second. Patched: older runs replay without it.
    if (r.morePending && patched('drain-callbacks')) {
      state.phase = 'draining';
      await condition(() => deleted, DRAIN_SPACING_MS, { summary: 'callbacks arrived during GetTask' });
      pending = true;
    }

    const waitMs = Math.max(1, Math.min(pollMs, info.expiresAt - Date.now()));
    state.phase = 'waiting';
    state.nextPollInMs = waitMs;
    setCurrentDetails(
      `remote task ${r.remoteTaskId ?? '?'} is ${r.remoteState ?? 'unknown'}${r.transient ? ` (last call failed: ${r.transient})` : ''}; next GetTask in ${Math.round(waitMs / 1000)} s or on a callback`,
    );
    const woken = await condition(() => pending || deleted, waitMs, {
      summary: `next GetTask in ${Math.round(waitMs / 1000)} s, or on a callback`,
    });
    // A callback resets the polling to its start; silence doubles it up to POLL_MAX.
    pollMs = woken && pending ? info.pollInitialMs : Math.min(pollMs * 2, info.pollMaxMs);

    if (workflowInfo().continueAsNewSuggested) {
      await condition(allHandlersFinished);
      return continueAsNew<typeof registrationWorkflow>({
        registrationId,
        pollMs,
        pending: pending || deleted,
      });
    }
  }
}
