/**
 * A config's line as migration 020's statements keep it, driven by random commands against real
 * Postgres (events with the bound, attempts beginning and ending with any outcome, jobs ending without
 * an attempt, the config paused, the sweep) and checked after each against the rule of
 * src/delivery/order.ts (`heldBy`): a job is due exactly when no earlier job of its line holds it, no
 * attempt begins on a job that is not due, at most one attempt of the line is on the wire, and every
 * job that becomes due is answered, once, by the statement that made it due.
 */
import fc from 'fast-check';
import { beginAttempt, endAttempt, finishJob } from '../../src/db/attempts';
import { closeLine, writeEvent } from '../../src/db/outbox';
import { heldBy, type LineJob } from '../../src/delivery/order';
import { isFinished, type DueJob, type JobStatus } from '../../src/delivery/types';
import { repairLines } from '../../src/starts/outbox';
import { createTestDb, type TestDb } from '../helpers/db';

jest.setTimeout(120_000);

let tdb: TestDb;
beforeAll(async () => {
  tdb = await createTestDb();
  await tdb.db.query(`INSERT INTO tenants (id) VALUES ('t')`);
});
afterAll(async () => {
  await tdb?.drop();
});

type Command =
  | { t: 'event' }
  | { t: 'begin'; pick: number }
  | { t: 'end'; pick: number; outcome: 'delivered' | 'retry' | 'failed' }
  | { t: 'finish'; pick: number }
  | { t: 'pause' }
  | { t: 'sweep' };

const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 5, arbitrary: fc.constant({ t: 'event' as const }) },
  { weight: 5, arbitrary: fc.record({ t: fc.constant('begin' as const), pick: fc.nat() }) },
  {
    weight: 5,
    arbitrary: fc.record({
      t: fc.constant('end' as const),
      pick: fc.nat(),
      outcome: fc.constantFrom('delivered' as const, 'retry' as const, 'failed' as const),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('finish' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ t: 'sweep' as const }) },
);
/** Up to 50 commands; in one run of five the config is paused somewhere among them (its line closes). */
const commands: fc.Arbitrary<Command[]> = fc
  .tuple(
    fc.array(command, { minLength: 5, maxLength: 50 }),
    fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.nat() }),
  )
  .map(([cmds, at]) =>
    at === undefined
      ? cmds
      : [
          ...cmds.slice(0, at % (cmds.length + 1)),
          { t: 'pause' as const },
          ...cmds.slice(at % (cmds.length + 1)),
        ],
  );

interface Row {
  id: string;
  seq: string;
  status: JobStatus;
  held_by: string | null;
  finished_at: Date | null;
  attempt_count: number;
  open: boolean;
}

let configs = 0;

async function run(cmds: Command[]): Promise<void> {
  const taskId = `line-${++configs}`;
  const cfg = (
    await tdb.db.query<{ row_id: string }>(
      `INSERT INTO push_configs (tenant_id, task_id, id, url) VALUES ('t', $1, 'c', 'https://127.0.0.1:1/hook')
       RETURNING row_id`,
      [taskId],
    )
  ).rows[0]!.row_id;
  const rows = async () =>
    (
      await tdb.db.query<Row>(
        `SELECT j.id, j.seq, j.status, j.held_by, j.finished_at, j.attempt_count,
                EXISTS (SELECT 1 FROM delivery_attempts a WHERE a.job_id = j.id AND a.outcome IS NULL) AS open
           FROM delivery_jobs j WHERE j.config_row_id = $1 ORDER BY j.seq`,
        [cfg],
      )
    ).rows;
  /** The line as the rule sees it: a job holds it while unfinished or with an attempt on the wire. */
  const lineOf = (rs: Row[]): LineJob[] =>
    rs.map((r) => ({ id: r.id, seq: BigInt(r.seq), status: r.status, openAttempt: r.open }));
  const dueOf = (rs: Row[]) => new Set(rs.filter((r) => r.held_by === null).map((r) => r.id));
  let paused = false;
  let now = Date.now();

  for (const c of cmds) {
    const before = await rows();
    const pick = <T>(xs: T[], n: number) => (xs.length > 0 ? xs[n % xs.length] : undefined);
    let reported: DueJob[] | undefined = [];
    now += 1_000;
    switch (c.t) {
      case 'event': {
        if (paused) continue;
        const w = await writeEvent(tdb.db, {
          tenantId: 't',
          taskId,
          kind: 'statusUpdate',
          body: '{}',
          deadlineMs: 3_600_000,
          boundPerConfig: 3,
          ordered: true,
        });
        reported = w.due;
        break;
      }
      case 'begin': {
        // Any unfinished job not on the wire, due or not: one that is not due must not start.
        const j = pick(
          before.filter((r) => ['queued', 'waiting_retry'].includes(r.status)),
          c.pick,
        );
        if (!j) continue;
        const b = await beginAttempt(
          tdb.db,
          { job: j.id, n: j.attempt_count + 1, nowMs: now, config: cfg, early: false },
          null,
        );
        const allowed = heldBy(BigInt(j.seq), lineOf(before)) === undefined;
        expect({ job: j.id, started: b.o_started }).toEqual({ job: j.id, started: allowed });
        break;
      }
      case 'end': {
        const j = pick(
          before.filter((r) => r.open),
          c.pick,
        );
        if (!j) continue;
        const status: JobStatus =
          c.outcome === 'delivered' ? 'delivered' : c.outcome === 'failed' ? 'failed' : 'waiting_retry';
        const e = await endAttempt(
          tdb.db,
          {
            job: j.id,
            n: j.attempt_count,
            config: cfg,
            nowMs: now,
            durationMs: 1,
            outcome: c.outcome === 'delivered' ? 'delivered' : c.outcome === 'failed' ? 'failed' : 'retry',
            httpStatus: c.outcome === 'delivered' ? 200 : c.outcome === 'failed' ? 500 : 503,
            error: null,
            retryAfterMs: null,
            status,
            reason: null,
            final: isFinished(status),
            waitMs: status === 'waiting_retry' ? 1_000 : null,
            configStatus: null,
            leaseMs: null,
          },
          null,
        );
        reported = e.o_due;
        break;
      }
      case 'finish': {
        // A job's end without an attempt, as its own run ends it (a due one: only due jobs have runs).
        const j = pick(
          before.filter((r) => r.held_by === null && ['queued', 'waiting_retry'].includes(r.status)),
          c.pick,
        );
        if (!j) continue;
        reported = (await finishJob(tdb.db, { job: j.id, status: 'expired', reason: null, leaseMs: null }))
          .o_due;
        break;
      }
      case 'pause': {
        if (paused) continue;
        paused = true;
        await tdb.db.query(`UPDATE push_configs SET status = 'auth_failed' WHERE row_id = $1`, [cfg]);
        await closeLine(tdb.db, cfg, 'auth_failed', 'http_401');
        reported = undefined; // closes jobs, makes none due
        break;
      }
      case 'sweep':
        reported = (await repairLines(tdb.db, 180_000, 60_000)).filter((j) =>
          before.some((r) => r.id === j.id),
        );
        break;
    }
    const after = await rows();
    const line = lineOf(after);
    // The rule: a job that has not ended is due exactly when no earlier job of the line holds it.
    for (const r of after)
      if (r.finished_at === null && r.status === 'queued')
        expect({ job: r.id, due: r.held_by === null }).toEqual({
          job: r.id,
          due: heldBy(BigInt(r.seq), line) === undefined,
        });
    // A job that has begun an attempt was due, and stays so.
    for (const r of after)
      if (['in_flight', 'waiting_retry'].includes(r.status)) expect(r.held_by).toBeNull();
    // At most one attempt of the line on the wire.
    expect(after.filter((r) => r.open).length).toBeLessThanOrEqual(1);
    // Ended means final and nothing on the wire.
    for (const r of after) if (r.finished_at !== null) expect(isFinished(r.status) && !r.open).toBe(true);
    // Every job that became due was answered by the statement that made it due, once.
    const dueBefore = dueOf(before);
    const newlyDue = after
      .filter((r) => r.held_by === null && !dueBefore.has(r.id) && !isFinished(r.status))
      .map((r) => r.id)
      .sort();
    if (reported !== undefined) {
      const ids = reported.map((j) => j.id);
      expect(new Set(ids).size).toBe(ids.length);
      expect(ids.filter((id) => after.some((r) => r.id === id && !isFinished(r.status))).sort()).toEqual(
        newlyDue,
      );
    } else expect(newlyDue).toEqual([]);
  }
}

it("the line's statements keep the rule of delivery/order.ts through any sequence of events, attempts and ends", async () => {
  await fc.assert(fc.asyncProperty(commands, run), { numRuns: 100 });
});
