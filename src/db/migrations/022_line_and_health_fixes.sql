-- Fixes to the statements of 020 and 021 (a review of the starts and config health):
--
-- * An attempt's on-wire time is measured on the database's clock from when it really began
--   (`began_at`): `started_at` is workflow time, which can be minutes before (an attempt waiting in
--   the slow lane's queue, or retried through a Postgres outage). Rows before this migration get its
--   time: they count as fresh for one more on-wire limit, the safe side.
-- * Config health counts each job once (`health_counted`): a rerun of an activity whose answer was
--   lost, or a second look at a job already ended, no longer counts it again; the sweep counts every
--   job it expires, not one per config. A `failing` warning is written once per stretch even when two
--   jobs end at the same instant.
-- * Every statement takes its locks in one order: the target's, the config's, the jobs'. The begin
--   of a config's first attempt, and the 2xx that moves config health's clock, lock the config row
--   before the job row (they wrote it after, and could deadlock with an event write).
-- * The supersede re-checks a job's status on the row version it waited for: a job that ended
--   meanwhile keeps its status.
-- * The sweep also expires due jobs still queued an hour past their deadline (their run was lost
--   before its first attempt), and advances their lines; configs in tenant order.
ALTER TABLE delivery_attempts ADD COLUMN began_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE delivery_jobs ADD COLUMN health_counted boolean NOT NULL DEFAULT false;

-- Final jobs whose attempt is (or was) on the wire: few, read by the sweep's repair.
CREATE INDEX delivery_jobs_final_open ON delivery_jobs (config_row_id)
  WHERE finished_at IS NULL AND status NOT IN ('queued', 'in_flight', 'waiting_retry');

CREATE OR REPLACE FUNCTION outbox_supersede_over_bound(config_row_ids bigint[], bound integer)
RETURNS SETOF uuid LANGUAGE sql VOLATILE AS $$
  WITH ranked AS (
    SELECT id, row_number() OVER (PARTITION BY config_row_id ORDER BY seq DESC) AS rn
      FROM delivery_jobs
     WHERE config_row_id = ANY(config_row_ids) AND status IN ('queued', 'in_flight', 'waiting_retry'))
  UPDATE delivery_jobs j
     SET status = 'superseded', next_attempt_at = NULL,
         finished_at = CASE WHEN j.status = 'in_flight' THEN NULL ELSE now() END
    FROM ranked
   WHERE j.id = ranked.id AND ranked.rn > bound
     AND j.status IN ('queued', 'in_flight', 'waiting_retry')
  RETURNING j.id
$$;

CREATE OR REPLACE FUNCTION outbox_finish_job(p jsonb,
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
  -- Its workflow ran: marked started, if the start's own mark was lost.
  UPDATE delivery_jobs
     SET status = p->>'status', reason = p->>'reason', next_attempt_at = NULL,
         finished_at = CASE WHEN status = 'in_flight' THEN NULL ELSE now() END,
         dispatched_at = coalesce(dispatched_at, now()), dispatch_lease = NULL
   WHERE id = v_job AND status IN ('queued', 'in_flight', 'waiting_retry')
  RETURNING finished_at IS NOT NULL INTO v_ended;
  SELECT status, attempt_count, reason INTO o_status, o_attempts, o_reason FROM delivery_jobs WHERE id = v_job;
  IF v_ordered AND coalesce(v_ended, false) THEN
    o_due := outbox_line_advance(v_config, (p->>'leaseMs')::double precision);
  END IF;
END $$;

CREATE OR REPLACE FUNCTION outbox_attempt_begin(p_attempt jsonb, p_slot jsonb,
  OUT o_started boolean, OUT o_acquired boolean, OUT o_suspect boolean, OUT o_granted text[],
  OUT o_unknown boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_job uuid := (p_attempt->>'job')::uuid;
  v_n integer := (p_attempt->>'n')::integer;
  v_config bigint := (p_attempt->>'config')::bigint;
  v_now timestamptz := to_timestamp((p_attempt->>'nowMs')::double precision / 1000.0);
  v_first boolean;
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
  -- The config's first attempt starts config health's clock: the config row's lock before the job's.
  SELECT true INTO v_first FROM push_configs WHERE row_id = v_config AND health_since IS NULL
    FOR NO KEY UPDATE;
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
  IF coalesce(v_first, false) THEN
    UPDATE push_configs SET health_since = v_now WHERE row_id = v_config AND health_since IS NULL;
  END IF;
  INSERT INTO delivery_attempts (job_id, n, started_at) VALUES (v_job, v_n, v_now);
END $$;

-- Config health (contract §§10, 11), in one place: `p_count` jobs of the config ended without a 2xx
-- at `p_now_ms`; `p_job`, when given, is the one job, counted once however often it is asked for (its
-- `health_counted`). One write of the config row, locked first: the failing stretch starts
-- (failing_since) or goes on (failed_jobs + p_count); when the config's clock (`health_since`: its last
-- 2xx, or its first attempt) is CONFIG_FAILING_AFTER before `p_now_ms`, and the minute by which a 2xx
-- may let the clock lag on top (a config stops only once even that minute is past, never early), it
-- stops as `failing`, with its audit row and a `stopped` event, and its line closes; else, once per
-- stretch, when failing_since is CONFIG_WARN_AFTER old, a `failing` warning. Returns the events
-- written and the due jobs of a closed line to wake (but `p_except`).
DROP FUNCTION outbox_config_health(bigint, double precision, double precision, double precision, uuid);
CREATE FUNCTION outbox_config_health(
  p_config bigint, p_job uuid, p_count integer, p_now_ms double precision,
  p_failing_after_ms double precision, p_warn_after_ms double precision, p_except uuid,
  OUT o_events text[], OUT o_woken uuid[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now timestamptz := to_timestamp(p_now_ms / 1000.0);
  stop_before timestamptz := to_timestamp((p_now_ms - p_failing_after_ms) / 1000.0) - interval '1 minute';
  warn_before timestamptz := to_timestamp((p_now_ms - p_warn_after_ms) / 1000.0);
  c record;
  v_stop boolean;
  v_warn boolean;
BEGIN
  o_events := '{}';
  o_woken := '{}';
  SELECT tenant_id, task_id, id, health_since, failing_since, warned_at INTO c FROM push_configs
   WHERE row_id = p_config AND status = 'active' AND deleted_at IS NULL
   FOR NO KEY UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  IF p_job IS NOT NULL THEN
    UPDATE delivery_jobs SET health_counted = true WHERE id = p_job AND NOT health_counted;
    IF NOT FOUND THEN RETURN; END IF;
  END IF;
  v_stop := c.health_since <= stop_before;
  v_warn := NOT v_stop AND c.warned_at IS NULL AND coalesce(c.failing_since, v_now) <= warn_before;
  UPDATE push_configs
     SET failing_since = coalesce(failing_since, v_now),
         failed_jobs = failed_jobs + p_count,
         status = CASE WHEN v_stop THEN 'stopped' ELSE status END,
         status_reason = CASE WHEN v_stop THEN 'failing' ELSE status_reason END,
         status_changed_at = CASE WHEN v_stop THEN now() ELSE status_changed_at END,
         warned_at = CASE WHEN v_warn THEN v_now ELSE warned_at END
   WHERE row_id = p_config;
  IF v_stop THEN
    INSERT INTO audit_log (tenant_id, actor, action, object_type, object_id, before, after)
      VALUES (c.tenant_id, 'system', 'push_config.status_changed', 'push_config', c.task_id || '/' || c.id,
              'active', 'stopped (failing)');
    PERFORM config_event_append(p_config, 'stopped', 'failing', v_now);
    o_events := ARRAY['stopped'];
    o_woken := ARRAY(SELECT outbox_line_close(p_config, 'stopped', 'failing', p_except));
  ELSIF v_warn THEN
    PERFORM config_event_append(p_config, 'failing', 'failing', v_now);
    o_events := ARRAY['failing'];
  END IF;
END $$;

-- An attempt's end (021), its locks in the one order: the target's (the slot back), then the config
-- row's before the job rows when the end may write the config (an ordered job's line, a config the
-- answer pauses or stops, a 2xx that moves config health's clock or ends a failing stretch). A 2xx
-- that found the config needing no write when it looked writes none (the clock may lag a 2xx by a
-- minute; a failing stretch that began in the same instant ends with the next 2xx).
CREATE OR REPLACE FUNCTION outbox_attempt_end(p_attempt jsonb, p_slot jsonb,
  OUT o_updated text, OUT o_cur_status text, OUT o_cur_attempts integer, OUT o_granted text[],
  OUT o_config_changed boolean, OUT o_wake uuid[], OUT o_due jsonb, OUT o_events text[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_job uuid := (p_attempt->>'job')::uuid;
  v_n integer := (p_attempt->>'n')::integer;
  v_config bigint := (p_attempt->>'config')::bigint;
  v_now_ms double precision := (p_attempt->>'nowMs')::double precision;
  v_status text := p_attempt->>'status';
  v_config_status text := p_attempt->>'configStatus';
  v_ordered boolean;
  v_health_write boolean := false;
  v_ended boolean := false;
BEGIN
  o_granted := '{}';
  o_config_changed := false;
  o_wake := '{}';
  o_due := '[]'::jsonb;
  o_events := '{}';
  IF p_slot IS NOT NULL THEN o_granted := ARRAY(SELECT outbound_release(p_slot)); END IF;
  SELECT ordered INTO v_ordered FROM delivery_jobs WHERE id = v_job;
  IF v_status = 'delivered' THEN
    SELECT true INTO v_health_write FROM push_configs
     WHERE row_id = v_config
       AND (failing_since IS NOT NULL OR warned_at IS NOT NULL OR failed_jobs > 0 OR last_delivered_at IS NULL
            OR health_since IS NULL OR health_since < to_timestamp(v_now_ms / 1000.0) - interval '1 minute');
    v_health_write := coalesce(v_health_write, false);
  END IF;
  IF coalesce(v_ordered, false) OR v_config_status IS NOT NULL OR v_health_write THEN
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
    -- A 2xx: config health's clock and last_delivered_at move; it ends a failing stretch.
    IF o_updated = 'delivered' AND v_health_write THEN
      o_events := outbox_config_delivered(v_config, v_now_ms);
    END IF;
    IF v_config_status IS NOT NULL THEN
      UPDATE push_configs SET status = v_config_status, status_reason = p_attempt->>'reason',
                              status_changed_at = now()
       WHERE row_id = v_config AND status = 'active' AND deleted_at IS NULL;
      o_config_changed := FOUND;
      IF o_config_changed THEN
        o_wake := ARRAY(SELECT outbox_line_close(v_config, v_config_status, p_attempt->>'reason', v_job));
        PERFORM config_event_append(v_config, v_config_status, p_attempt->>'reason', to_timestamp(v_now_ms / 1000.0));
        o_events := o_events || v_config_status;
      END IF;
    END IF;
  END IF;
  IF coalesce(v_ordered, false) AND coalesce(v_ended, false) THEN
    o_due := outbox_line_advance(v_config, (p_attempt->>'leaseMs')::double precision);
  END IF;
END $$;

-- Jobs past their deadline that nothing will run end `expired` here, on the database's clock: those
-- that wait for their line (not due, no workflow), and due ones still queued an hour past it (their
-- run was lost before its first attempt; a live run expires its job itself, on workflow time). Each config's row
-- is locked first (one another statement holds waits for the next sweep), configs in tenant order
-- (their events take the tenant's lock); config health counts every job expired, its line advances.
-- Returns the due jobs to wake of configs that stopped, the config events written, and the jobs made
-- due (leased for `p_lease_ms`).
DROP FUNCTION outbox_expire_waiting(double precision, double precision);
CREATE FUNCTION outbox_expire_waiting(
  p_failing_after_ms double precision, p_warn_after_ms double precision, p_lease_ms double precision,
  OUT o_woken uuid[], OUT o_events text[], OUT o_due jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  r bigint;
  n integer;
  h record;
BEGIN
  o_woken := '{}';
  o_events := '{}';
  o_due := '[]'::jsonb;
  FOR r IN
    SELECT c.row_id FROM push_configs c
     WHERE c.row_id IN (SELECT j.config_row_id FROM delivery_jobs j
                         WHERE j.status = 'queued'
                           AND j.deadline < now() - CASE WHEN j.held_by IS NULL THEN interval '1 hour'
                                                         ELSE interval '0' END)
     ORDER BY c.tenant_id, c.row_id
     FOR NO KEY UPDATE SKIP LOCKED
  LOOP
    WITH e AS (
      UPDATE delivery_jobs SET status = 'expired', finished_at = now(), health_counted = true,
                               dispatch_lease = NULL
       WHERE config_row_id = r AND status = 'queued'
         AND deadline < now() - CASE WHEN held_by IS NULL THEN interval '1 hour' ELSE interval '0' END
      RETURNING 1)
    SELECT count(*) INTO n FROM e;
    IF n = 0 THEN CONTINUE; END IF;
    SELECT * INTO h FROM outbox_config_health(r, NULL, n, extract(epoch FROM now()) * 1000, p_failing_after_ms,
                                              p_warn_after_ms, NULL);
    o_woken := o_woken || h.o_woken;
    o_events := o_events || h.o_events;
    o_due := o_due || outbox_line_advance(r, p_lease_ms);
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION outbox_line_repair(p_on_wire_ms double precision, p_lease_ms double precision)
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
                             AND a.began_at > now() - make_interval(secs => p_on_wire_ms / 1000))
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
                          AND a.began_at > now() - make_interval(secs => p_on_wire_ms / 1000));
    due := due || outbox_line_advance(r, p_lease_ms);
  END LOOP;
  RETURN due;
END $$;
