-- Starts (docs/architecture.md, "Starts"): a committed job waits for one of two things only, its line
-- or admission, and this migration holds the current definition of every function a job's line, its
-- attempt and its target's slots go through.
--
-- * Due. A job is due when nothing holds its line: `held_by` is null. A job written behind an
--   unfinished earlier job of its config (DELIVERY_ORDER=per_config) is written not due, with
--   `held_by` naming that job, and has no workflow. Every statement that ends a job of a line makes
--   the line's new head due in the same transaction (outbox_line_advance), holding the config row's
--   lock first, then the job rows (the event write's order), so that a write and an end never miss
--   each other nor deadlock.
-- * Ended. `finished_at` says when a job ended: a final status and no attempt on the wire. A job
--   superseded while its attempt is on the wire keeps `finished_at` null until that attempt's end
--   records it (or the sweep, once the attempt is older than the on-wire limit), and holds its line
--   until then. The first unended ordered job of a config (the line's head) is always due.
-- * A line that ends as a whole (its config paused, stopped or deleted) ends its jobs that are not
--   due here, in SQL, with the config's status (outbox_line_close): they never had a workflow. The
--   due ones are woken and ended by their workflows, as before. A job not due past its deadline is
--   ended `expired` by the sweep, on the database's clock (outbox_expire_waiting); one that becomes
--   due first is expired by its own run, on workflow time. Config health is evaluated in SQL wherever
--   a job ends without a 2xx (outbox_config_failing).
-- * Admission. A due job is started by the relay of the process whose statement made it due (leased
--   to it: `dispatch_lease`), or, when that process leaves it (no lease), by any process's claim run,
--   told by a NOTIFY on `a2a_push_due`. First contacts (a target without a recent 2xx) take a turn
--   from their tenant's rate, kept here (start_turns), so that it holds across processes; a job past
--   it waits for its turn in `start_after`.
--
-- The slot and attempt functions take one JSON argument each (their fields are named where they are
-- built: src/db/attempts.ts, src/db/slots.ts) instead of 15-20 positional ones; the old signatures
-- are dropped. During a rolling upgrade a worker of the previous version fails its attempt's first
-- statement, and Temporal retries the attempt (no attempt is used) until a worker of this version
-- takes it: stop the old workers first. An api of the previous version keeps writing events (the
-- write's arguments are unchanged) and starts its jobs as it did; jobs it holds back or starts delayed
-- are made due and woken by this version's processes (src/starts/client.ts, wakeLegacyRuns).

-- Ended means final with nothing on the wire (the check of 001 tied finished_at to the status alone).
ALTER TABLE delivery_jobs DROP CONSTRAINT delivery_jobs_check;
ALTER TABLE delivery_jobs ADD CONSTRAINT delivery_jobs_unfinished_not_ended
  CHECK (status NOT IN ('queued', 'in_flight', 'waiting_retry') OR finished_at IS NULL);
UPDATE delivery_jobs j SET finished_at = NULL
 WHERE j.finished_at IS NOT NULL AND j.status IN ('superseded', 'cancelled')
   AND EXISTS (SELECT 1 FROM delivery_attempts a
                WHERE a.job_id = j.id AND a.outcome IS NULL AND a.started_at > now() - interval '3 minutes');

-- `held_by` was the job a queued job was written behind (or found holding it at its last check); it
-- now says the job is not due. Recomputed for the rows of the previous version: a queued ordered job
-- is due when no earlier ordered job of its config is unended.
UPDATE delivery_jobs SET held_by = NULL WHERE held_by IS NOT NULL AND NOT (ordered AND status = 'queued');
UPDATE delivery_jobs j
   SET held_by = (SELECT d.id FROM delivery_jobs d
                   WHERE d.config_row_id = j.config_row_id AND d.ordered AND d.finished_at IS NULL
                     AND d.seq < j.seq
                   ORDER BY d.seq DESC LIMIT 1)
 WHERE j.ordered AND j.status = 'queued';

-- A config's line: its unended ordered jobs in commit order.
CREATE INDEX delivery_jobs_line ON delivery_jobs (config_row_id, seq) WHERE ordered AND finished_at IS NULL;
-- What a claim run takes: due jobs whose workflow has not started, round robin by tenant.
CREATE INDEX delivery_jobs_due_tenant ON delivery_jobs (tenant_id, seq)
  WHERE dispatched_at IS NULL AND held_by IS NULL AND status = 'queued';
DROP INDEX delivery_jobs_undispatched_tenant;

-- First contacts per tenant (GCRA: each tenant's theoretical arrival time, src/starts/admission.ts).
CREATE TABLE start_turns (
  tenant_id text PRIMARY KEY,
  tat       timestamptz NOT NULL
);

-- The jobs a relay needs to start, as JSON (src/starts/relay.ts: DueJob).
CREATE FUNCTION outbox_due_json(p_ids uuid[]) RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'id', j.id, 'tenantId', j.tenant_id, 'taskId', j.task_id, 'configId', j.config_id, 'url', c.url,
           'requestId', j.request_id, 'traceparent', j.traceparent,
           'dispatched', j.dispatched_at IS NOT NULL) ORDER BY j.seq), '[]'::jsonb)
    FROM delivery_jobs j JOIN push_configs c ON c.row_id = j.config_row_id
   WHERE j.id = ANY (p_ids)
$$;

-- The caller holds the config row's lock. The line's head becomes due if it is not; a job made due is
-- leased to the caller for `p_lease_ms` (its relay starts it), else announced on a2a_push_due for any
-- process's claim run. Returns the jobs made due (outbox_due_json).
CREATE FUNCTION outbox_line_advance(p_config bigint, p_lease_ms double precision)
RETURNS jsonb LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  made uuid[];
BEGIN
  WITH head AS (
    SELECT j.id FROM delivery_jobs j
     WHERE j.config_row_id = p_config AND j.ordered AND j.finished_at IS NULL
     ORDER BY j.seq LIMIT 1),
  due AS (
    UPDATE delivery_jobs d
       SET held_by = NULL,
           dispatch_lease = CASE WHEN p_lease_ms IS NULL OR d.dispatched_at IS NOT NULL THEN d.dispatch_lease
                                 ELSE now() + make_interval(secs => p_lease_ms / 1000) END
      FROM head WHERE d.id = head.id AND d.held_by IS NOT NULL
    RETURNING d.id)
  SELECT coalesce(array_agg(id), '{}') INTO made FROM due;
  IF cardinality(made) = 0 THEN RETURN '[]'::jsonb; END IF;
  IF p_lease_ms IS NULL THEN PERFORM pg_notify('a2a_push_due', ''); END IF;
  RETURN outbox_due_json(made);
END $$;

-- The last unended ordered job of a config's line: a job written now is behind it (null: it heads
-- the line). The caller holds the config row's lock.
CREATE FUNCTION outbox_line_tail(p_config bigint) RETURNS uuid LANGUAGE sql STABLE AS $$
  SELECT id FROM delivery_jobs WHERE config_row_id = p_config AND ordered AND finished_at IS NULL
   ORDER BY seq DESC LIMIT 1
$$;

-- A config's line ends as a whole (its config paused, stopped or deleted; the caller changed the
-- config row, so it holds its lock): the jobs not due end here with `p_status` and `p_reason`, without
-- a workflow. Returns the due unfinished jobs, but `p_except`: their workflows are woken to end.
CREATE FUNCTION outbox_line_close(p_config bigint, p_status text, p_reason text, p_except uuid DEFAULT NULL)
RETURNS SETOF uuid LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  UPDATE delivery_jobs SET status = p_status, reason = p_reason, finished_at = now()
   WHERE config_row_id = p_config AND status = 'queued' AND held_by IS NOT NULL;
  RETURN QUERY SELECT id FROM delivery_jobs
    WHERE config_row_id = p_config AND status IN ('queued', 'in_flight', 'waiting_retry')
      AND id IS DISTINCT FROM p_except;
END $$;

-- Marks the oldest unfinished jobs of each config superseded while a config holds more than `bound`.
-- One whose attempt is on the wire (in_flight) ends when that attempt does.
CREATE OR REPLACE FUNCTION outbox_supersede_over_bound(config_row_ids bigint[], bound integer)
RETURNS SETOF uuid LANGUAGE sql VOLATILE AS $$
  WITH ranked AS (
    SELECT id, row_number() OVER (PARTITION BY config_row_id ORDER BY seq DESC) AS rn
      FROM delivery_jobs
     WHERE config_row_id = ANY(config_row_ids) AND status IN ('queued', 'in_flight', 'waiting_retry'))
  UPDATE delivery_jobs j
     SET status = 'superseded', next_attempt_at = NULL,
         finished_at = CASE WHEN j.status = 'in_flight' THEN NULL ELSE now() END
    FROM ranked WHERE j.id = ranked.id AND ranked.rn > bound
  RETURNING j.id
$$;

-- After new jobs of these configs (their rows locked by the caller): the bound, then each line's head
-- due. Returns the superseded jobs (to wake) and the jobs made due (outbox_due_json).
CREATE FUNCTION outbox_after_write(
  p_config_row_ids bigint[], p_bound integer, p_lease_ms double precision,
  OUT o_superseded uuid[], OUT o_due jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  r bigint;
BEGIN
  o_superseded := ARRAY(SELECT outbox_supersede_over_bound(p_config_row_ids, p_bound));
  o_due := '[]'::jsonb;
  IF cardinality(o_superseded) = 0 THEN RETURN; END IF;
  FOR r IN SELECT DISTINCT config_row_id FROM delivery_jobs WHERE id = ANY (o_superseded) AND ordered LOOP
    o_due := o_due || outbox_line_advance(r, p_lease_ms);
  END LOOP;
END $$;

-- The outbox write (017) with due jobs: a new job behind an unended job of its config is written not
-- due (`held_by`); the due ones are leased for `p_lease_ms` (the writer's relay starts them) or
-- announced on a2a_push_due. The bound may make older jobs due (`o_due`). The arguments are those of
-- 017, so an api of the previous version keeps writing during an upgrade.
DROP FUNCTION outbox_write_event(text, text, text, text, double precision, text, double precision, integer, text, boolean);
CREATE FUNCTION outbox_write_event(
  p_tenant text, p_task text, p_kind text, p_body text, p_deadline_ms double precision,
  p_request_id text, p_lease_ms double precision, p_bound integer, p_traceparent text DEFAULT NULL,
  p_ordered boolean DEFAULT NULL,
  OUT o_event_id bigint, OUT o_job_ids uuid[], OUT o_config_ids text[], OUT o_urls text[],
  OUT o_superseded uuid[], OUT o_woken uuid[], OUT o_behind uuid[], OUT o_due jsonb)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  created timestamptz;
  row_ids bigint[];
  seqs bigint[];
BEGIN
  INSERT INTO task_events (tenant_id, task_id, kind, body) VALUES (p_tenant, p_task, p_kind, p_body)
    RETURNING id, created_at INTO o_event_id, created;
  WITH c AS (
    SELECT row_id, id, url FROM push_configs
     WHERE tenant_id = p_tenant AND task_id = p_task AND deleted_at IS NULL AND status = 'active'
     ORDER BY row_id FOR UPDATE)
  SELECT coalesce(array_agg(row_id ORDER BY row_id), '{}'), coalesce(array_agg(id ORDER BY row_id), '{}'),
         coalesce(array_agg(url ORDER BY row_id), '{}')
    INTO row_ids, o_config_ids, o_urls FROM c;
  o_job_ids := ARRAY(SELECT gen_random_uuid() FROM generate_series(1, cardinality(row_ids)));
  o_superseded := '{}';
  o_woken := '{}';
  o_behind := '{}';
  o_due := '[]'::jsonb;
  IF cardinality(row_ids) = 0 THEN RETURN; END IF;
  WITH u AS (
    UPDATE push_configs SET push_seq = push_seq + 1 WHERE row_id = ANY (row_ids) RETURNING row_id, push_seq)
  SELECT array_agg(u.push_seq ORDER BY u.row_id) INTO seqs FROM u;
  IF coalesce(p_ordered, false) THEN
    -- Heads waiting for a retry: the receiver may be back, the new event asks for one early attempt.
    WITH heads AS (
      SELECT DISTINCT ON (config_row_id) id, status FROM delivery_jobs
       WHERE config_row_id = ANY (row_ids) AND ordered AND finished_at IS NULL
       ORDER BY config_row_id, seq),
    w AS (
      UPDATE delivery_jobs j SET wake_early = true FROM heads
       WHERE j.id = heads.id AND heads.status = 'waiting_retry' AND NOT j.wake_early AND NOT j.early_taken
      RETURNING j.id)
    SELECT coalesce(array_agg(id), '{}') INTO o_woken FROM w;
    o_behind := ARRAY(SELECT outbox_line_tail(r.row_id)
                        FROM unnest(row_ids) WITH ORDINALITY AS r (row_id, ord) ORDER BY r.ord);
  ELSE
    o_behind := ARRAY(SELECT NULL::uuid FROM generate_series(1, cardinality(row_ids)));
  END IF;
  INSERT INTO delivery_jobs (id, tenant_id, event_id, config_row_id, task_id, config_id, deadline,
                             request_id, traceparent, dispatch_lease, push_seq, ordered, held_by)
  SELECT j.id, p_tenant, o_event_id, j.row_id, p_task, j.config_id,
         created + make_interval(secs => p_deadline_ms / 1000), p_request_id, p_traceparent,
         CASE WHEN p_lease_ms IS NULL OR j.behind IS NOT NULL THEN NULL
              ELSE now() + make_interval(secs => p_lease_ms / 1000) END,
         j.push_seq, coalesce(p_ordered, false), j.behind
    FROM unnest(o_job_ids, row_ids, o_config_ids, seqs, o_behind)
         WITH ORDINALITY AS j (id, row_id, config_id, push_seq, behind, ord)
   ORDER BY j.ord;
  IF p_lease_ms IS NULL AND EXISTS (SELECT 1 FROM unnest(o_behind) b WHERE b IS NULL) THEN
    PERFORM pg_notify('a2a_push_due', '');
  END IF;
  SELECT a.o_superseded, a.o_due INTO o_superseded, o_due FROM outbox_after_write(row_ids, p_bound, p_lease_ms) a;
END $$;

-- A job ends without an attempt in this call (config deleted or not active, deadline passed): with
-- the config row's lock first when it is ordered, then the line's head due. A job whose attempt is on
-- the wire (in_flight) ends when that attempt does. Returns the job as it is and the jobs made due.
CREATE FUNCTION outbox_finish_job(p jsonb,
  OUT o_status text, OUT o_attempts integer, OUT o_reason text, OUT o_due jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_job uuid := (p->>'job')::uuid;
  v_config bigint;
  v_ordered boolean;
  v_ended boolean;
BEGIN
  o_due := '[]'::jsonb;
  SELECT config_row_id, ordered INTO v_config, v_ordered FROM delivery_jobs WHERE id = v_job;
  IF NOT FOUND THEN RETURN; END IF;
  IF v_ordered THEN PERFORM 1 FROM push_configs WHERE row_id = v_config FOR NO KEY UPDATE; END IF;
  UPDATE delivery_jobs
     SET status = p->>'status', reason = p->>'reason', next_attempt_at = NULL,
         finished_at = CASE WHEN status = 'in_flight' THEN NULL ELSE now() END
   WHERE id = v_job AND status IN ('queued', 'in_flight', 'waiting_retry')
  RETURNING finished_at IS NOT NULL INTO v_ended;
  SELECT status, attempt_count, reason INTO o_status, o_attempts, o_reason FROM delivery_jobs WHERE id = v_job;
  IF v_ordered AND coalesce(v_ended, false) THEN
    o_due := outbox_line_advance(v_config, (p->>'leaseMs')::double precision);
  END IF;
END $$;

-- The current host-slot functions (010, 015, 016), in one place. A target's row is every call's lock.
CREATE OR REPLACE FUNCTION outbound_taken(p_target text, p_except text)
RETURNS integer LANGUAGE sql STABLE AS $$
  SELECT count(*)::integer FROM outbound_slots
   WHERE target = p_target AND holder IS DISTINCT FROM p_except AND (NOT granted OR firm)
$$;

CREATE OR REPLACE FUNCTION outbound_grant(p_target text, p_capacity integer, p_grant_ms double precision)
RETURNS SETOF text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  live integer;
  cursor_tenant text;
  in_slow_lane boolean;
  w record;
BEGIN
  -- Every slot row counts here, soft grants too: a release wakes at most as many waiters as there is
  -- room, not the whole line.
  SELECT count(*) INTO live FROM outbound_slots WHERE target = p_target;
  SELECT last_tenant, coalesce(suspect_until > now(), false) INTO cursor_tenant, in_slow_lane
    FROM outbound_targets WHERE target = p_target;
  WHILE live < p_capacity LOOP
    SELECT holder, tenant_id, seq, bumped INTO w FROM outbound_waiters
     WHERE target = p_target AND tenant_id > cursor_tenant ORDER BY tenant_id, seq LIMIT 1;
    IF NOT FOUND THEN
      SELECT holder, tenant_id, seq, bumped INTO w FROM outbound_waiters
       WHERE target = p_target ORDER BY tenant_id, seq LIMIT 1;
      EXIT WHEN NOT FOUND;
    END IF;
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = w.holder;
    INSERT INTO outbound_slots (target, holder, tenant_id, expires_at, granted, seq, firm)
      VALUES (p_target, w.holder, w.tenant_id, now() + make_interval(secs => p_grant_ms / 1000), true, w.seq,
              in_slow_lane OR w.bumped)
      ON CONFLICT (target, holder) DO NOTHING;
    cursor_tenant := w.tenant_id;
    live := live + 1;
    RETURN NEXT w.holder;
  END LOOP;
  UPDATE outbound_targets SET last_tenant = cursor_tenant
   WHERE target = p_target AND last_tenant IS DISTINCT FROM cursor_tenant;
END $$;

-- A grant its waiter did not take in time goes back in line at its old place, firm next time.
CREATE OR REPLACE FUNCTION outbound_expire(p_target text, p_wait_ms double precision)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  INSERT INTO outbound_waiters (target, holder, tenant_id, seq, expires_at, bumped)
    SELECT target, holder, tenant_id, seq, now() + make_interval(secs => p_wait_ms / 1000), true
      FROM outbound_slots
     WHERE target = p_target AND granted AND seq IS NOT NULL AND expires_at < now()
    ON CONFLICT (target, holder) DO NOTHING;
  DELETE FROM outbound_slots WHERE target = p_target AND expires_at < now();
  DELETE FROM outbound_waiters WHERE target = p_target AND expires_at < now();
END $$;

-- Takes a slot for the holder (one granted to it, one it already holds, or a free one), or puts it in
-- line. `p`: target, holder, tenant, capacity, leaseMs, waitMs, grantMs, refuseSuspect (a fast-lane
-- call: a target in the slow lane gives it nothing). `o_granted`: other holders granted free slots
-- meanwhile, for the caller to wake.
DROP FUNCTION outbound_acquire(text, text, text, integer, double precision, double precision, boolean, double precision);
CREATE FUNCTION outbound_acquire(p jsonb,
  OUT o_acquired boolean, OUT o_suspect boolean, OUT o_granted text[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  p_target text := p->>'target';
  p_holder text := p->>'holder';
  p_tenant text := p->>'tenant';
  p_capacity integer := (p->>'capacity')::integer;
  p_lease_ms double precision := (p->>'leaseMs')::double precision;
  p_wait_ms double precision := (p->>'waitMs')::double precision;
  p_grant_ms double precision := (p->>'grantMs')::double precision;
  live integer;
  mine record;
BEGIN
  o_granted := '{}';
  INSERT INTO outbound_targets (target) VALUES (p_target) ON CONFLICT (target) DO NOTHING;
  SELECT coalesce(suspect_until > now(), false) INTO o_suspect
    FROM outbound_targets WHERE target = p_target FOR UPDATE;
  -- A call in the fast lane to a target in the slow lane takes nothing: it moves to the slow lane.
  IF o_suspect AND coalesce((p->>'refuseSuspect')::boolean, false) THEN
    o_acquired := false;
    RETURN;
  END IF;
  PERFORM outbound_expire(p_target, p_wait_ms);
  SELECT granted, firm, seq, tenant_id INTO mine FROM outbound_slots
   WHERE target = p_target AND holder = p_holder;
  IF FOUND AND mine.granted AND NOT mine.firm
     AND outbound_taken(p_target, p_holder) >= p_capacity THEN
    -- A soft grant whose room someone else took meanwhile: back in line at its place, firm next time.
    DELETE FROM outbound_slots WHERE target = p_target AND holder = p_holder;
    INSERT INTO outbound_waiters (target, holder, tenant_id, seq, expires_at, bumped)
      VALUES (p_target, p_holder, mine.tenant_id, mine.seq, now() + make_interval(secs => p_wait_ms / 1000), true)
      ON CONFLICT (target, holder) DO UPDATE SET expires_at = excluded.expires_at, bumped = true;
    o_granted := ARRAY(SELECT outbound_grant(p_target, p_capacity, p_grant_ms));
    o_acquired := p_holder = ANY(o_granted);
    IF o_acquired THEN
      UPDATE outbound_slots SET granted = false, expires_at = now() + make_interval(secs => p_lease_ms / 1000)
       WHERE target = p_target AND holder = p_holder;
      o_granted := array_remove(o_granted, p_holder);
    END IF;
    RETURN;
  END IF;
  IF FOUND THEN
    -- Its own call's slot (renewed) or a grant it may take.
    UPDATE outbound_slots SET expires_at = now() + make_interval(secs => p_lease_ms / 1000), granted = false
     WHERE target = p_target AND holder = p_holder;
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
    -- Room the expired rows freed goes to the line.
    o_granted := ARRAY(SELECT outbound_grant(p_target, p_capacity, p_grant_ms));
    o_acquired := true;
    RETURN;
  END IF;
  IF o_suspect THEN
    -- The slow lane's strict line: a free slot only when nobody waits ahead.
    SELECT count(*) INTO live FROM outbound_slots WHERE target = p_target;
    o_acquired := live < p_capacity AND NOT EXISTS (
      SELECT 1 FROM outbound_waiters WHERE target = p_target AND holder <> p_holder);
  ELSE
    -- Work-conserving: room on the wire is taken, line or not.
    o_acquired := outbound_taken(p_target, NULL) < p_capacity;
  END IF;
  IF o_acquired THEN
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
    INSERT INTO outbound_slots (target, holder, tenant_id, expires_at)
      VALUES (p_target, p_holder, p_tenant, now() + make_interval(secs => p_lease_ms / 1000));
    -- Served: the round robin goes on after this tenant (no write while one tenant uses the target).
    UPDATE outbound_targets SET last_tenant = p_tenant WHERE target = p_target AND last_tenant <> p_tenant;
    RETURN;
  END IF;
  -- In line (a waiter that comes back keeps its place), then any free slot goes to the line's head.
  INSERT INTO outbound_waiters (target, holder, tenant_id, expires_at)
    VALUES (p_target, p_holder, p_tenant, now() + make_interval(secs => p_wait_ms / 1000))
    ON CONFLICT (target, holder) DO UPDATE SET expires_at = excluded.expires_at;
  o_granted := ARRAY(SELECT outbound_grant(p_target, p_capacity, p_grant_ms));
  IF p_holder = ANY(o_granted) THEN
    UPDATE outbound_slots SET granted = false,
           expires_at = now() + make_interval(secs => p_lease_ms / 1000)
     WHERE target = p_target AND holder = p_holder;
    o_granted := array_remove(o_granted, p_holder);
    o_acquired := true;
  ELSE
    o_acquired := false;
  END IF;
END $$;

-- Gives back the holder's slot (or its place in line) and hands free slots to the next waiters.
-- `p`: target, holder, capacity, grantMs, waitMs, suspectMs, health ('healthy' clears the target's
-- slow-lane mark and records its 2xx, at most once a minute; 'suspect' sets the mark for suspectMs).
DROP FUNCTION outbound_release(text, text, integer, double precision, text, double precision, double precision);
CREATE FUNCTION outbound_release(p jsonb)
RETURNS SETOF text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  p_target text := p->>'target';
  p_holder text := p->>'holder';
  p_health text := coalesce(p->>'health', 'neutral');
BEGIN
  PERFORM 1 FROM outbound_targets WHERE target = p_target FOR UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  IF p_health = 'suspect' THEN
    UPDATE outbound_targets
       SET suspect_until = now() + make_interval(secs => (p->>'suspectMs')::double precision / 1000)
     WHERE target = p_target;
  ELSIF p_health = 'healthy' THEN
    UPDATE outbound_targets SET suspect_until = NULL, healthy_at = now()
     WHERE target = p_target
       AND (suspect_until IS NOT NULL OR healthy_at IS NULL OR healthy_at < now() - interval '1 minute');
  END IF;
  DELETE FROM outbound_slots WHERE target = p_target AND holder = p_holder;
  DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
  PERFORM outbound_expire(p_target, (p->>'waitMs')::double precision);
  RETURN QUERY SELECT outbound_grant(p_target, (p->>'capacity')::integer, (p->>'grantMs')::double precision);
END $$;

-- An attempt's start. `p_attempt`: job, n, nowMs (workflow time), config, early. `p_slot` (null: no
-- target, a guard refusal is recorded as the attempt): outbound_acquire's fields, plus knownMs for a
-- fast-lane call: a target in the slow lane, or without a 2xx within knownMs, takes no slot and no
-- place and starts nothing (`o_suspect`, or `o_unknown`: the caller moves the attempt to the slow
-- lane). Only with a slot does the attempt start: the job in_flight, config health's clock, the
-- attempt's row; a job no longer startable (ended meanwhile) gives the slot back at once.
DROP FUNCTION outbox_attempt_begin(uuid, integer, bigint, bigint, boolean, text, text, text, boolean, integer, double precision, double precision, double precision, double precision, double precision);
DROP FUNCTION outbox_attempt_begin(uuid, integer, bigint, bigint, boolean, text, text, text, boolean, integer, double precision, double precision, double precision, double precision);
CREATE FUNCTION outbox_attempt_begin(p_attempt jsonb, p_slot jsonb,
  OUT o_started boolean, OUT o_acquired boolean, OUT o_suspect boolean, OUT o_granted text[],
  OUT o_unknown boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_job uuid := (p_attempt->>'job')::uuid;
  v_n integer := (p_attempt->>'n')::integer;
  v_now timestamptz := to_timestamp((p_attempt->>'nowMs')::double precision / 1000.0);
  t record;
BEGIN
  o_started := false;
  o_acquired := true;
  o_suspect := false;
  o_unknown := false;
  o_granted := '{}';
  IF p_slot IS NOT NULL THEN
    IF p_slot->>'knownMs' IS NOT NULL THEN
      SELECT coalesce(suspect_until > now(), false) AS suspect,
             coalesce(healthy_at > now() - make_interval(secs => (p_slot->>'knownMs')::double precision / 1000),
                      false) AS known
        INTO t FROM outbound_targets WHERE target = p_slot->>'target';
      IF NOT FOUND OR t.suspect OR NOT t.known THEN
        o_acquired := false;
        o_suspect := coalesce(t.suspect, false);
        o_unknown := NOT o_suspect;
        RETURN;
      END IF;
    END IF;
    SELECT a.o_acquired, a.o_suspect, a.o_granted INTO o_acquired, o_suspect, o_granted
      FROM outbound_acquire(p_slot) a;
    IF NOT o_acquired THEN RETURN; END IF;
  END IF;
  -- Its workflow runs: marked started, if the start's own mark was lost.
  UPDATE delivery_jobs SET status = 'in_flight', attempt_count = v_n, next_attempt_at = NULL,
                           wake_early = false, early_taken = (p_attempt->>'early')::boolean,
                           dispatched_at = coalesce(dispatched_at, now()), dispatch_lease = NULL
   WHERE id = v_job AND status IN ('queued', 'waiting_retry') AND held_by IS NULL;
  IF NOT FOUND THEN
    -- Ended meanwhile (superseded, cancelled): nothing goes on the wire, the slot goes back.
    IF p_slot IS NOT NULL THEN
      o_granted := o_granted || ARRAY(SELECT outbound_release(p_slot || '{"health": "neutral"}'::jsonb));
    END IF;
    RETURN;
  END IF;
  o_started := true;
  -- Config health's clock starts at the config's first attempt.
  UPDATE push_configs SET health_since = v_now
   WHERE row_id = (p_attempt->>'config')::bigint AND health_since IS NULL;
  INSERT INTO delivery_attempts (job_id, n, started_at) VALUES (v_job, v_n, v_now);
END $$;

-- An attempt's end. The slot goes back first (`p_slot`: outbound_release's fields; null: none), the
-- target's lock before any other, as in the begin; then, for an ordered job, the config row's lock
-- before the job rows. `p_attempt`: job, n, config, nowMs (workflow time), durationMs, outcome,
-- httpStatus, error, retryAfterMs, status (the job's new status), reason, final, waitMs, and
-- configStatus when the answer pauses or stops the config (the job's line then ends as a whole),
-- leaseMs for the jobs made due. Two runs of one attempt can overlap (Temporal ran it again while the
-- first run's worker was alive but silent): the run that made the request may replace 'interrupted'
-- with what really happened; 'interrupted' never replaces a real outcome. A 2xx always lands (the
-- receiver has it, even if the job was superseded or its config deleted meanwhile); anything else only
-- on the attempt's own state: a late run of attempt n never overwrites attempt n+1's. A job already
-- final whose attempt this was ends now. Returns the job's status (`o_updated` when this call changed
-- it), the holders granted a slot, whether the config changed, the jobs of its closed line to wake,
-- and the jobs made due.
DROP FUNCTION outbox_attempt_end(uuid, integer, integer, text, integer, text, bigint, text, text, boolean, bigint, bigint, bigint, text, text, text, integer, double precision, double precision, double precision);
CREATE FUNCTION outbox_attempt_end(p_attempt jsonb, p_slot jsonb,
  OUT o_updated text, OUT o_cur_status text, OUT o_cur_attempts integer, OUT o_granted text[],
  OUT o_config_changed boolean, OUT o_wake uuid[], OUT o_due jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_job uuid := (p_attempt->>'job')::uuid;
  v_n integer := (p_attempt->>'n')::integer;
  v_config bigint := (p_attempt->>'config')::bigint;
  v_now_ms double precision := (p_attempt->>'nowMs')::double precision;
  v_status text := p_attempt->>'status';
  v_config_status text := p_attempt->>'configStatus';
  v_ordered boolean;
  v_ended boolean := false;
BEGIN
  o_granted := '{}';
  o_config_changed := false;
  o_wake := '{}';
  o_due := '[]'::jsonb;
  IF p_slot IS NOT NULL THEN o_granted := ARRAY(SELECT outbound_release(p_slot)); END IF;
  SELECT ordered INTO v_ordered FROM delivery_jobs WHERE id = v_job;
  IF coalesce(v_ordered, false) OR v_config_status IS NOT NULL THEN
    PERFORM 1 FROM push_configs WHERE row_id = v_config FOR NO KEY UPDATE;
  END IF;
  UPDATE delivery_attempts
     SET duration_ms = (p_attempt->>'durationMs')::integer, outcome = p_attempt->>'outcome',
         http_status = (p_attempt->>'httpStatus')::integer, error = p_attempt->>'error',
         retry_after_ms = (p_attempt->>'retryAfterMs')::bigint
   WHERE job_id = v_job AND n = v_n
     AND (outcome IS NULL OR (outcome = 'interrupted' AND p_attempt->>'outcome' <> 'interrupted'));
  UPDATE delivery_jobs
     SET status = v_status, reason = p_attempt->>'reason',
         finished_at = CASE WHEN (p_attempt->>'final')::boolean THEN now() ELSE NULL END,
         next_attempt_at = CASE WHEN p_attempt->>'waitMs' IS NULL THEN NULL
                                ELSE to_timestamp((v_now_ms + (p_attempt->>'waitMs')::double precision) / 1000.0) END
   WHERE id = v_job
     AND CASE WHEN v_status = 'delivered' THEN status <> 'delivered'
              ELSE status = 'in_flight' AND attempt_count = v_n END
  RETURNING status, attempt_count INTO o_updated, o_cur_attempts;
  IF o_updated IS NULL THEN
    -- Nothing changed: the job as it is. One that ended meanwhile (superseded) while this attempt was
    -- on the wire has ended now.
    UPDATE delivery_jobs SET finished_at = now()
     WHERE id = v_job AND finished_at IS NULL AND status NOT IN ('queued', 'in_flight', 'waiting_retry')
    RETURNING true INTO v_ended;
    SELECT status, attempt_count INTO o_cur_status, o_cur_attempts FROM delivery_jobs WHERE id = v_job;
  ELSE
    o_cur_status := o_updated;
    v_ended := (p_attempt->>'final')::boolean;
    -- A 2xx resets config health's clock (moved at most once a minute per config).
    IF o_updated = 'delivered' THEN
      UPDATE push_configs SET health_since = to_timestamp(v_now_ms / 1000.0)
       WHERE row_id = v_config
         AND (health_since IS NULL OR health_since < to_timestamp(v_now_ms / 1000.0) - interval '1 minute');
    END IF;
    IF v_config_status IS NOT NULL THEN
      UPDATE push_configs SET status = v_config_status, status_reason = p_attempt->>'reason',
                              status_changed_at = now()
       WHERE row_id = v_config AND status = 'active' AND deleted_at IS NULL;
      o_config_changed := FOUND;
      IF o_config_changed THEN
        o_wake := ARRAY(SELECT outbox_line_close(v_config, v_config_status, p_attempt->>'reason', v_job));
      END IF;
    END IF;
  END IF;
  IF coalesce(v_ordered, false) AND coalesce(v_ended, false) THEN
    o_due := outbox_line_advance(v_config, (p_attempt->>'leaseMs')::double precision);
  END IF;
END $$;

-- Config health (contract §10), in one place: a job of the config ended without a 2xx at `p_now_ms`
-- (workflow time for an attempt's end, the database's clock for the sweep). When the config's clock
-- (`health_since`: its last 2xx, or its first attempt) is CONFIG_FAILING_AFTER before that, and the
-- minute by which outbox_attempt_end may let the clock lag a 2xx on top (so that a config stops only
-- once even that minute is past, never early), the config stops as `failing`, with its audit row, and
-- its line closes. Returns the due jobs of its line to wake, but `p_except`; null when it did not stop.
CREATE FUNCTION outbox_config_failing(
  p_config bigint, p_now_ms double precision, p_failing_after_ms double precision, p_except uuid)
RETURNS uuid[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  c record;
BEGIN
  UPDATE push_configs SET status = 'stopped', status_reason = 'failing', status_changed_at = now()
   WHERE row_id = p_config AND status = 'active' AND deleted_at IS NULL
     AND health_since <= to_timestamp((p_now_ms - p_failing_after_ms) / 1000.0) - interval '1 minute'
  RETURNING tenant_id, task_id, id INTO c;
  IF NOT FOUND THEN RETURN NULL; END IF;
  INSERT INTO audit_log (tenant_id, actor, action, object_type, object_id, before, after)
    VALUES (c.tenant_id, 'system', 'push_config.status_changed', 'push_config', c.task_id || '/' || c.id,
            'active', 'stopped (failing)');
  RETURN ARRAY(SELECT outbox_line_close(p_config, 'stopped', 'failing', p_except));
END $$;

-- Jobs that wait for their line (not due, no workflow) past their deadline end `expired` here, on the
-- database's clock, each config's row locked first (a config another statement holds waits for the
-- next sweep); config health is evaluated for each such config. Returns the due jobs to wake of the
-- configs that stopped, and how many stopped.
CREATE FUNCTION outbox_expire_waiting(p_failing_after_ms double precision, OUT o_woken uuid[], OUT o_stopped integer)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  r bigint;
  w uuid[];
BEGIN
  o_woken := '{}';
  o_stopped := 0;
  FOR r IN
    SELECT c.row_id FROM push_configs c
     WHERE c.row_id IN (SELECT j.config_row_id FROM delivery_jobs j
                         WHERE j.status = 'queued' AND j.held_by IS NOT NULL AND j.deadline < now())
     FOR NO KEY UPDATE SKIP LOCKED
  LOOP
    UPDATE delivery_jobs SET status = 'expired', finished_at = now()
     WHERE config_row_id = r AND status = 'queued' AND held_by IS NOT NULL AND deadline < now();
    w := outbox_config_failing(r, extract(epoch FROM now()) * 1000, p_failing_after_ms, NULL);
    IF w IS NOT NULL THEN
      o_woken := o_woken || w;
      o_stopped := o_stopped + 1;
    END IF;
  END LOOP;
END $$;

-- The sweep's repair of lines (src/starts/relay.ts): a job superseded while its attempt was on the
-- wire, whose attempt is older than `p_on_wire_ms` or closed without its end being recorded, has
-- ended; and every line whose head is not due (a line of the previous version) gets it made due.
-- Config rows another statement holds are skipped (the next sweep). Returns the jobs made due, leased
-- to the caller.
CREATE FUNCTION outbox_line_repair(p_on_wire_ms double precision, p_lease_ms double precision)
RETURNS jsonb LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  r bigint;
  due jsonb := '[]'::jsonb;
BEGIN
  FOR r IN
    SELECT c.row_id FROM push_configs c
     WHERE c.row_id IN (
       SELECT j.config_row_id FROM delivery_jobs j
        WHERE j.finished_at IS NULL AND j.status NOT IN ('queued', 'in_flight', 'waiting_retry')
          AND NOT EXISTS (SELECT 1 FROM delivery_attempts a
                           WHERE a.job_id = j.id AND a.outcome IS NULL
                             AND a.started_at > now() - make_interval(secs => p_on_wire_ms / 1000))
       UNION
       SELECT h.config_row_id FROM (
         SELECT DISTINCT ON (config_row_id) config_row_id, held_by FROM delivery_jobs
          WHERE ordered AND finished_at IS NULL ORDER BY config_row_id, seq) h
        WHERE h.held_by IS NOT NULL)
     FOR NO KEY UPDATE SKIP LOCKED
  LOOP
    UPDATE delivery_jobs j SET finished_at = now()
     WHERE j.config_row_id = r AND j.finished_at IS NULL AND j.status NOT IN ('queued', 'in_flight', 'waiting_retry')
       AND NOT EXISTS (SELECT 1 FROM delivery_attempts a
                        WHERE a.job_id = j.id AND a.outcome IS NULL
                          AND a.started_at > now() - make_interval(secs => p_on_wire_ms / 1000));
    due := due || outbox_line_advance(r, p_lease_ms);
  END LOOP;
  RETURN due;
END $$;

-- The line read by the previous version's attempt (013): gone with its callers.
DROP FUNCTION outbox_line_ahead(bigint, bigint, bigint, double precision);
