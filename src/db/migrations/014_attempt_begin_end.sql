-- Issue 21: fewer round trips per delivery attempt, and a host slot held for little more than the POST.
-- outbox_attempt_begin takes the target's host slot (outbound_acquire) and, when it got one, starts the
-- attempt (the job in_flight, config health's clock, the attempt's row) in the same statement; a job no
-- longer startable gives the slot back at once. outbox_attempt_end gives the slot back first (same lock
-- order as the begin: the target, then the job) and records the attempt's outcome on the attempt and the
-- job (what the activity's recordOutcome statement did). The next job of an ordered line is read after
-- this commits (lineAfter), not in here: a job that joined the line and found this one unfinished just
-- before the commit is only seen by a read after it.

CREATE FUNCTION outbox_attempt_begin(
  p_job uuid, p_n integer, p_now_ms bigint, p_config bigint, p_early boolean,
  p_target text, p_holder text, p_tenant text, p_refuse_suspect boolean,
  p_capacity integer, p_lease_ms double precision, p_slot_wait_ms double precision,
  p_grant_ms double precision, p_suspect_ms double precision,
  OUT o_started boolean, OUT o_acquired boolean, OUT o_suspect boolean, OUT o_granted text[])
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  o_started := false;
  o_acquired := true;
  o_suspect := false;
  o_granted := '{}';
  -- No target (a guard refusal is recorded as the attempt): no slot.
  IF p_target IS NOT NULL THEN
    SELECT a.o_acquired, a.o_suspect, a.o_granted INTO o_acquired, o_suspect, o_granted
      FROM outbound_acquire(p_target, p_holder, p_tenant, p_capacity, p_lease_ms, p_slot_wait_ms,
                            p_refuse_suspect, p_grant_ms) a;
    IF NOT o_acquired THEN RETURN; END IF;
  END IF;
  UPDATE delivery_jobs SET status = 'in_flight', attempt_count = p_n, next_attempt_at = NULL,
                           held_by = NULL, wake_early = false, early_taken = p_early
   WHERE id = p_job AND status IN ('queued', 'waiting_retry');
  IF NOT FOUND THEN
    -- Ended meanwhile (superseded, cancelled): nothing goes on the wire, the slot goes back.
    IF p_target IS NOT NULL THEN
      o_granted := o_granted || ARRAY(SELECT outbound_release(p_target, p_holder, p_capacity, p_grant_ms,
                                                              'neutral', p_suspect_ms, p_slot_wait_ms));
    END IF;
    RETURN;
  END IF;
  o_started := true;
  -- Config health's clock starts at the config's first attempt.
  UPDATE push_configs SET health_since = to_timestamp(p_now_ms / 1000.0)
   WHERE row_id = p_config AND health_since IS NULL;
  INSERT INTO delivery_attempts (job_id, n, started_at) VALUES (p_job, p_n, to_timestamp(p_now_ms / 1000.0));
END $$;

CREATE FUNCTION outbox_attempt_end(
  p_job uuid, p_n integer, p_duration_ms integer, p_outcome text, p_http_status integer, p_error text,
  p_retry_after_ms bigint, p_status text, p_reason text, p_final boolean, p_wait_ms bigint,
  p_now_ms bigint, p_config bigint,
  p_target text, p_holder text, p_health text,
  p_capacity integer, p_grant_ms double precision, p_suspect_ms double precision,
  p_slot_wait_ms double precision,
  OUT o_updated text, OUT o_cur_status text, OUT o_cur_attempts integer, OUT o_granted text[])
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  o_granted := '{}';
  IF p_target IS NOT NULL THEN
    o_granted := ARRAY(SELECT outbound_release(p_target, p_holder, p_capacity, p_grant_ms, p_health,
                                               p_suspect_ms, p_slot_wait_ms));
  END IF;
  -- Two runs of one attempt can overlap (Temporal ran it again while the first run's worker was alive
  -- but silent): the run that made the request may replace 'interrupted' with what really happened;
  -- 'interrupted' never replaces a real outcome.
  UPDATE delivery_attempts SET duration_ms = p_duration_ms, outcome = p_outcome, http_status = p_http_status,
                               error = p_error, retry_after_ms = p_retry_after_ms
   WHERE job_id = p_job AND n = p_n
     AND (outcome IS NULL OR (outcome = 'interrupted' AND p_outcome <> 'interrupted'));
  -- A 2xx always lands: the receiver has it, even if the job was superseded or its config deleted
  -- meanwhile. Anything else only on this attempt's own state: a late run of attempt n never
  -- overwrites attempt n+1's.
  UPDATE delivery_jobs
     SET status = p_status, reason = p_reason, finished_at = CASE WHEN p_final THEN now() ELSE NULL END,
         next_attempt_at = CASE WHEN p_wait_ms IS NULL THEN NULL
                                ELSE to_timestamp((p_now_ms + p_wait_ms) / 1000.0) END
   WHERE id = p_job
     AND CASE WHEN p_status = 'delivered' THEN status <> 'delivered'
              ELSE status = 'in_flight' AND attempt_count = p_n END
  RETURNING status, attempt_count INTO o_updated, o_cur_attempts;
  IF o_updated IS NULL THEN
    -- Nothing changed: the job as it is.
    SELECT status, attempt_count INTO o_cur_status, o_cur_attempts FROM delivery_jobs WHERE id = p_job;
  ELSE
    o_cur_status := o_updated;
    -- A 2xx resets config health's clock (moved at most once a minute per config).
    IF o_updated = 'delivered' THEN
      UPDATE push_configs SET health_since = to_timestamp(p_now_ms / 1000.0)
       WHERE row_id = p_config
         AND (health_since IS NULL OR health_since < to_timestamp(p_now_ms / 1000.0) - interval '1 minute');
    END IF;
  END IF;
END $$;
