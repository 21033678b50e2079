/**
 * The words of a delivery job that several rooms share (the api's views, the activities, the starts,
 * the database modules): one home, so that none of them imports another for a type.
 */
export type ConfigStatus = 'active' | 'auth_failed' | 'stopped';

export const UNFINISHED = ['queued', 'in_flight', 'waiting_retry'] as const;

export type JobStatus =
  | (typeof UNFINISHED)[number]
  | 'delivered'
  | 'failed'
  | 'exhausted'
  | 'expired'
  | 'cancelled'
  | 'superseded'
  | 'auth_failed'
  | 'stopped';

export const isFinished = (s: JobStatus) => !(UNFINISHED as readonly string[]).includes(s);

/**
 * A job that has become due (nothing holds its line) and what starting its workflow needs: ids and the
 * target's URL (for its host and lane), never a secret or a body. Statements that make jobs due answer
 * these (outbox_due_json, migration 020).
 */
export interface DueJob {
  id: string;
  tenantId: string;
  taskId: string;
  configId: string;
  url: string;
  /** The request that wrote the job: its workflow start carries it (src/request-context.ts). */
  requestId?: string | null;
  /** The writing request's trace context: the start joins it (src/tracing.ts). */
  traceparent?: string | null;
  /**
   * Its workflow started before it was due: a run of the previous version, held in its start delay or
   * waiting for a wake (src/starts/client.ts, wakeLegacyRuns).
   */
  dispatched?: boolean;
}

/**
 * Where a statement that makes jobs due hands them: the relay of the process that ran it
 * (src/starts/relay.ts). Activities and routes see only this.
 */
export interface DueHandoff {
  /**
   * How long the statement should lease the jobs it makes due to this process (its relay starts them
   * at once), or undefined when this process leaves them to any process's claim run (a NOTIFY tells
   * them): its relay has its share of starts in flight.
   */
  leaseMs(tenantId: string): number | undefined;
  /** Starts the jobs this process's statement made due and leased to it. */
  take(jobs: DueJob[]): void;
}
