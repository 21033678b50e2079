-- A config's health, visible before it stops, and a feed of config events per tenant (contract §11).
--
-- push_configs gains the health a client reads (all in workflow time: the attempt's `now`, or the
-- database's clock for what the sweep ends):
-- * last_delivered_at: the last 2xx, moved with config health's clock (at most once a minute: a 2xx is
--   every attempt's write, this is none extra);
-- * failing_since: the end of the first job without a 2xx after the last 2xx (null while healthy);
-- * failed_jobs: the jobs that ended without a 2xx since then;
-- * warned_at: when this failing stretch's `failing` warning was written (null: none yet).
-- A job that ends without a 2xx writes the config row once (outbox_config_health), and a 2xx that ends
-- a failing stretch once more; a healthy 2xx writes nothing new.
ALTER TABLE push_configs
  ADD COLUMN last_delivered_at timestamptz,
  ADD COLUMN failing_since timestamptz,
  ADD COLUMN failed_jobs integer NOT NULL DEFAULT 0,
  ADD COLUMN warned_at timestamptz;
UPDATE push_configs c SET last_delivered_at = d.at
  FROM (SELECT j.config_row_id, max(a.started_at) AS at
          FROM delivery_attempts a JOIN delivery_jobs j ON j.id = a.job_id
         WHERE a.outcome = 'delivered' GROUP BY j.config_row_id) d
 WHERE c.row_id = d.config_row_id;

-- The feed: one row per change of a config's state a client must learn of, written in the same
-- transaction as the change; `at` is the change's time (workflow time where a job's end made it),
-- `created_at` the row's (retention).
CREATE TABLE config_events (
  cursor     bigserial PRIMARY KEY,
  tenant_id  text NOT NULL REFERENCES tenants (id),
  task_id    text NOT NULL,
  config_id  text NOT NULL,
  kind       text NOT NULL CHECK (kind IN ('failing', 'recovered', 'auth_failed', 'stopped', 'deleted')),
  reason     text,
  at         timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX config_events_tenant ON config_events (tenant_id, cursor);
CREATE INDEX config_events_created ON config_events (created_at);

-- Appends an event of a config (by row). The tenant's transaction lock is taken last, and only when an
-- item is written: cursors follow commit order per tenant, so a reader paging by cursor never skips
-- one that commits late. NOTIFY wakes long-polling readers.
CREATE FUNCTION config_event_append(p_config bigint, p_kind text, p_reason text, p_at timestamptz)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  c record;
BEGIN
  SELECT tenant_id, task_id, id INTO c FROM push_configs WHERE row_id = p_config;
  PERFORM pg_advisory_xact_lock(hashtext('a2a_push_config_events:' || c.tenant_id));
  INSERT INTO config_events (tenant_id, task_id, config_id, kind, reason, at)
    VALUES (c.tenant_id, c.task_id, c.id, p_kind, p_reason, p_at);
  PERFORM pg_notify('a2a_push_config_events', c.tenant_id);
END $$;

-- Config health (contract §§10, 11), in one place: a job of the config ended without a 2xx at
-- `p_now_ms`. One write of the config row: the failing stretch starts (failing_since) or goes on
-- (failed_jobs + 1); when the config's clock (`health_since`: its last 2xx, or its first attempt) is
-- CONFIG_FAILING_AFTER before `p_now_ms`, and the minute by which outbox_attempt_end may let the clock
-- lag a 2xx on top (a config stops only once even that minute is past, never early), it stops as
-- `failing`, with its audit row and a `stopped` event, and its line closes; else, once per stretch,
-- when failing_since is CONFIG_WARN_AFTER old, a `failing` warning. (SET reads the row before the
-- update, RETURNING after it.) Returns the events written and the due jobs of a closed line to wake
-- (but `p_except`).
DROP FUNCTION outbox_config_failing(bigint, double precision, double precision, uuid);
CREATE FUNCTION outbox_config_health(
  p_config bigint, p_now_ms double precision, p_failing_after_ms double precision,
  p_warn_after_ms double precision, p_except uuid,
  OUT o_events text[], OUT o_woken uuid[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now timestamptz := to_timestamp(p_now_ms / 1000.0);
  stop_before timestamptz := to_timestamp((p_now_ms - p_failing_after_ms) / 1000.0) - interval '1 minute';
  warn_before timestamptz := to_timestamp((p_now_ms - p_warn_after_ms) / 1000.0);
  c record;
BEGIN
  o_events := '{}';
  o_woken := '{}';
  UPDATE push_configs
     SET failing_since = coalesce(failing_since, v_now),
         failed_jobs = failed_jobs + 1,
         status = CASE WHEN health_since <= stop_before THEN 'stopped' ELSE status END,
         status_reason = CASE WHEN health_since <= stop_before THEN 'failing' ELSE status_reason END,
         status_changed_at = CASE WHEN health_since <= stop_before THEN now() ELSE status_changed_at END,
         warned_at = CASE WHEN health_since <= stop_before OR warned_at IS NOT NULL THEN warned_at
                          WHEN coalesce(failing_since, v_now) <= warn_before THEN v_now
                          ELSE warned_at END
   WHERE row_id = p_config AND status = 'active' AND deleted_at IS NULL
  RETURNING tenant_id, task_id, id, status, warned_at INTO c;
  IF NOT FOUND THEN RETURN; END IF;
  IF c.status = 'stopped' THEN
    INSERT INTO audit_log (tenant_id, actor, action, object_type, object_id, before, after)
      VALUES (c.tenant_id, 'system', 'push_config.status_changed', 'push_config', c.task_id || '/' || c.id,
              'active', 'stopped (failing)');
    PERFORM config_event_append(p_config, 'stopped', 'failing', v_now);
    o_events := ARRAY['stopped'];
    o_woken := ARRAY(SELECT outbox_line_close(p_config, 'stopped', 'failing', p_except));
  ELSIF c.warned_at = v_now THEN
    PERFORM config_event_append(p_config, 'failing', 'failing', v_now);
    o_events := ARRAY['failing'];
  END IF;
END $$;

-- A 2xx at `p_now_ms` (workflow time) for the config: config health's clock and last_delivered_at
-- move (at most once a minute: they are every 2xx's); a 2xx that ends a failing stretch resets it (its
-- row locked first, found only then), and writes `recovered` when a warning was written in it. Returns
-- the events written.
CREATE FUNCTION outbox_config_delivered(p_config bigint, p_now_ms double precision)
RETURNS text[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now timestamptz := to_timestamp(p_now_ms / 1000.0);
  c record;
BEGIN
  UPDATE push_configs SET health_since = v_now, last_delivered_at = v_now
   WHERE row_id = p_config AND failing_since IS NULL AND warned_at IS NULL AND failed_jobs = 0
     AND (health_since IS NULL OR health_since < v_now - interval '1 minute' OR last_delivered_at IS NULL);
  IF FOUND THEN RETURN '{}'; END IF;
  SELECT warned_at INTO c FROM push_configs
   WHERE row_id = p_config AND (failing_since IS NOT NULL OR warned_at IS NOT NULL OR failed_jobs > 0)
   FOR NO KEY UPDATE;
  IF NOT FOUND THEN RETURN '{}'; END IF;
  UPDATE push_configs SET health_since = v_now, last_delivered_at = v_now, failing_since = NULL,
                          failed_jobs = 0, warned_at = NULL
   WHERE row_id = p_config;
  IF c.warned_at IS NOT NULL AND EXISTS (SELECT 1 FROM push_configs WHERE row_id = p_config AND status = 'active'
                                                                  AND deleted_at IS NULL) THEN
    PERFORM config_event_append(p_config, 'recovered', NULL, v_now);
    RETURN ARRAY['recovered'];
  END IF;
  RETURN '{}';
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
-- the jobs made due, and the config events written (021: health and the feed).
DROP FUNCTION outbox_attempt_end(jsonb, jsonb);
CREATE FUNCTION outbox_attempt_end(p_attempt jsonb, p_slot jsonb,
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
  v_ended boolean := false;
BEGIN
  o_granted := '{}';
  o_config_changed := false;
  o_wake := '{}';
  o_due := '[]'::jsonb;
  o_events := '{}';
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
    -- A 2xx: config health's clock and last_delivered_at move; it ends a failing stretch.
    IF o_updated = 'delivered' THEN o_events := outbox_config_delivered(v_config, v_now_ms); END IF;
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

-- Jobs that wait for their line (not due, no workflow) past their deadline end `expired` here, on the
-- database's clock, each config's row locked first (a config another statement holds waits for the
-- next sweep); config health is evaluated for each such config. Returns the due jobs to wake of the
-- configs that stopped, and the config events written.
DROP FUNCTION outbox_expire_waiting(double precision);
CREATE FUNCTION outbox_expire_waiting(
  p_failing_after_ms double precision, p_warn_after_ms double precision, OUT o_woken uuid[], OUT o_events text[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  r bigint;
  h record;
BEGIN
  o_woken := '{}';
  o_events := '{}';
  FOR r IN
    SELECT c.row_id FROM push_configs c
     WHERE c.row_id IN (SELECT j.config_row_id FROM delivery_jobs j
                         WHERE j.status = 'queued' AND j.held_by IS NOT NULL AND j.deadline < now())
     FOR NO KEY UPDATE SKIP LOCKED
  LOOP
    UPDATE delivery_jobs SET status = 'expired', finished_at = now()
     WHERE config_row_id = r AND status = 'queued' AND held_by IS NOT NULL AND deadline < now();
    SELECT * INTO h FROM outbox_config_health(r, extract(epoch FROM now()) * 1000, p_failing_after_ms,
                                              p_warn_after_ms, NULL);
    o_woken := o_woken || h.o_woken;
    o_events := o_events || h.o_events;
  END LOOP;
END $$;
