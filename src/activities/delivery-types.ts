import type { Logger } from 'pino';
import type { HealthRule } from '../delivery/health';
import type { Db } from '../db/pool';
import type { HostSlots } from '../db/slots';
import type { Classification } from '../delivery/classify';
import type { RetrySettings } from '../delivery/schedule';
import type { DueHandoff, DueJob, JobStatus } from '../delivery/types';
import type { AddressPolicy, OutboundClient } from '../outbound';
import type { Keyring } from '../sealing/keyring';

/** The delivery activity's input, answer and dependencies (src/activities/delivery.ts). */

/** Workflow time and a sample of the workflow's deterministic random: every decision is in Temporal time. */
export interface AttemptInput {
  jobId: string;
  attempt: number;
  now: number;
  jitter: number;
  /**
   * The lane this call runs in (its task queue). `fast` from the workflow that knows lanes: a target
   * in the slow lane then takes no slot here. Absent (a run of the workflow before lanes): the call
   * takes its slot wherever it runs, as that workflow cannot move.
   */
  lane?: 'slow' | 'fast';
}

export interface AttemptOutput {
  /** The job's status after this call. */
  status: JobStatus;
  /** DELIVERY_MAX_ATTEMPTS, for the operator's view of the plan ("attempt 3 of 8"). */
  maxAttempts?: number;
  /** Attempts used so far. */
  attempts: number;
  /** Present when an attempt was made (or found interrupted) in this call. */
  outcome?: Classification['outcome'] | 'interrupted';
  reason?: string;
  httpStatus?: number;
  /** Present when the job waits for another attempt (or for a slot at its target). */
  waitMs?: number;
  /** The job waits for a slot at this host (OUTBOUND_HOST_CONCURRENCY), not for a retry: no attempt used. */
  waitingForSlot?: string;
  /** The next call belongs in the slow lane: its target recently timed out, refused or was slow. */
  lane?: 'slow';
  /**
   * The job is not due: it waits for this earlier delivery of its config to end. Only a run of the
   * previous version asks before its job is due (it started before); no attempt is used, and the job's
   * becoming due wakes it (src/starts/client.ts, wakeLegacyRuns).
   */
  waitingFor?: string;
}

export interface DeliveryDeps {
  db: Db;
  keyring: Keyring;
  http: OutboundClient;
  policy: AddressPolicy;
  retry: RetrySettings;
  timeoutMs: number;
  logger: Logger;
  /** The host slots (OUTBOUND_HOST_CONCURRENCY), shared by every worker through Postgres. */
  slots: HostSlots;
  /** Wakes running delivery workflows (granted a slot, or their line closed): best effort, timers repair. */
  wake: (jobIds: string[]) => Promise<void>;
  /** Where the jobs an attempt's end makes due go: this process's relay. */
  due: DueHandoff;
  /** CONFIG_FAILING_AFTER and CONFIG_WARN_AFTER (workflow time): config health's rule. */
  health: HealthRule;
  /** Times this worker's local attempts, for its workflow task slots (src/worker/workflow-slots.ts). */
  localAttempts?: { begin(): number; end(id: number): void };
  /** A job started eagerly holds its tenant's eager place until its attempt call here ends. */
  eagerStarts?: { done(jobId: string): void };
}

/** What one call answers, and the jobs its statements made due (handed to the relay after the call). */
export type Answer = AttemptOutput & { due?: DueJob[] };
