/**
 * Two known receivers turn into black holes: they accept every request and never answer. Their
 * attempts hang until DELIVERY_TIMEOUT (30 s here), each host's up to OUTBOUND_HOST_CONCURRENCY (8):
 * 16 on the wire. Meanwhile a third receiver's deliveries go through: none waits for the hanging ones,
 * under both delivery workflow types. Under lean each hanging attempt is a local activity that keeps
 * its run's workflow task slot: 16 of them would hold all of 10 fixed slots and stall the worker
 * (with `WORKER_WORKFLOW_TASK_SLOTS=10` this test fails); the elastic slots (src/worker/workflow-slots.ts)
 * stop counting an attempt after a second. Its 30 s, longer than lean's 20 s workflow task timeout,
 * is covered by the SDK's task heartbeat, so no second worker task reruns it: each attempt is exactly
 * one request.
 *
 * Real processes: `src/main.ts api` and `src/main.ts worker` as children, the run's dev server and
 * Postgres (a database of its own per type), three scripted HTTPS receivers on 127.0.0.1 (three ports:
 * three targets).
 */
import { createTestDb, type TestDb } from '../helpers/db';
import { eventually, markTargetAnswered } from '../helpers/harness';
import { startReceiver, type Receiver, type ScriptedAnswer } from '../helpers/receiver';
import {
  createConfigVia,
  ready,
  serviceEnv,
  spawnService,
  stopAll,
  type Svc,
  writeEventVia,
} from './helpers/procs';

const DEAD_HOSTS = 2;
/** Jobs per dead host: its 8 slots on the wire, 2 waiting for a slot. */
const PER_DEAD_HOST = 10;
const HANGING = DEAD_HOSTS * PER_DEAD_HOST;
const HEALTHY = 10;
const HOST_SLOTS = 8;
const ON_WIRE = DEAD_HOSTS * HOST_SLOTS;

describe('the delivery workflow', () => {
  const kind = 'lean';
  let tdb: TestDb;
  const dead: Receiver[] = [];
  let healthy: Receiver;
  let env: Record<string, string>;
  let api: Svc;
  const svcs: Svc[] = [];
  // The black holes: every request hangs until the test says the receivers are back.
  let deadAnswer: ScriptedAnswer = { hang: true };

  beforeAll(async () => {
    tdb = await createTestDb();
    for (let h = 0; h < DEAD_HOSTS; h++) dead.push(await startReceiver({ script: () => deadAnswer }));
    healthy = await startReceiver({ script: () => ({ status: 200 }) });
    env = serviceEnv({
      databaseUrl: tdb.url,
      temporalAddress: process.env.TEST_TEMPORAL_ADDRESS!,
      extra: {
        DELIVERY_TIMEOUT: '30s',
        OUTBOUND_HOST_CONCURRENCY: String(HOST_SLOTS),
      },
    });
    api = await spawnService('api', env);
    svcs.push(api);
    const worker = await spawnService('worker', env);
    svcs.push(worker);
    await Promise.all([ready(api), ready(worker)]);
    // All answered lately: their attempts run in the fast lane (lean: as local activities).
    for (const r of [...dead, healthy]) await markTargetAnswered(tdb.db, r.url);
  });

  afterAll(async () => {
    await stopAll(svcs);
    for (const r of dead) await r.close();
    await healthy?.close();
    await tdb?.drop();
  });

  const key = () => env.BOOTSTRAP_API_KEY!;

  const event = (taskId: string) => writeEventVia(api, key(), taskId);

  const jobs = async (ids: string[]) =>
    (
      await tdb.db.query<{ id: string; status: string; attempt_count: number }>(
        'SELECT id, status, attempt_count FROM delivery_jobs WHERE id = ANY($1::uuid[])',
        [ids],
      )
    ).rows;

  const attempts = async (ids: string[]) =>
    (
      await tdb.db.query<{ job_id: string; n: number; outcome: string | null; error: string | null }>(
        'SELECT job_id, n, outcome, error FROM delivery_attempts WHERE job_id = ANY($1::uuid[]) ORDER BY job_id, n',
        [ids],
      )
    ).rows;

  const deadRequests = () => dead.flatMap((r) => r.requests);
  const requestsFor = (id: string) => deadRequests().filter((q) => q.headers['x-a2a-push-delivery'] === id);

  it(`another target's deliveries go through while ${ON_WIRE} attempts hang at ${DEAD_HOSTS} hosts; each attempt is one request, and all end delivered once the hosts are back`, async () => {
    for (let i = 0; i < HANGING; i++)
      await createConfigVia(api, key(), `task-dead-${i}`, dead[i % DEAD_HOSTS]!.url);
    for (let i = 0; i < HEALTHY; i++) await createConfigVia(api, key(), `task-ok-${i}`, healthy.url);

    const hanging: string[] = [];
    for (let i = 0; i < HANGING; i++) hanging.push(await event(`task-dead-${i}`));
    // Each dead host's slots all taken by requests on the wire; the other jobs wait for a slot.
    for (const r of dead) await r.waitFor(HOST_SLOTS, 60_000);

    const elsewhere: string[] = [];
    for (let i = 0; i < HEALTHY; i++) elsewhere.push(await event(`task-ok-${i}`));
    await eventually(
      () => jobs(elsewhere),
      (rows) =>
        rows.length === HEALTHY && rows.every((r) => r.status === 'delivered' && r.attempt_count === 1),
      60_000,
    );
    // Every healthy delivery ended while the hanging attempts were all still on the wire (none has an
    // outcome yet), and no more than each host's bound of them reached a dead receiver.
    const meanwhile = await attempts(hanging);
    expect(meanwhile).toHaveLength(ON_WIRE);
    expect(meanwhile.every((a) => a.n === 1 && a.outcome === null)).toBe(true);
    for (const r of dead) expect(r.requests).toHaveLength(HOST_SLOTS);
    expect(healthy.requests).toHaveLength(HEALTHY);

    // The receivers come back: requests from now on are answered; the ones on the wire still hang
    // until their timeout, and their jobs retry.
    deadAnswer = { status: 200 };
    const final = await eventually(
      () => jobs(hanging),
      (rows) => rows.length === HANGING && rows.every((r) => r.status === 'delivered'),
      180_000,
    );
    expect(final).toHaveLength(HANGING);

    const rows = await attempts(hanging);
    let timedOut = 0;
    for (const id of hanging) {
      const own = rows.filter((a) => a.job_id === id);
      // Each attempt is one request, no more: no attempt was run twice (lean: no workflow task rerun).
      expect(requestsFor(id)).toHaveLength(own.length);
      expect(own.map((a) => a.n)).toEqual(own.map((_, i) => i + 1));
      expect(own.at(-1)).toMatchObject({ outcome: 'delivered' });
      for (const a of own.slice(0, -1)) expect(a).toMatchObject({ outcome: 'retry', error: 'timeout' });
      timedOut += own.length - 1;
    }
    // The requests that hung were the first wave's: each of them ended as a timeout.
    expect(timedOut).toBeGreaterThanOrEqual(ON_WIRE);
    process.stdout.write(
      `hanging-receiver (${kind}): ${HEALTHY} delivered elsewhere while ${ON_WIRE} hung; ` +
        `${HANGING} delivered after, ${timedOut} attempts timed out\n`,
    );
  });
});
