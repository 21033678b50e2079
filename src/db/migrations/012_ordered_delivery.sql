-- Ordered delivery (contract §10, issue 20): a config's pushes in event order.
--
-- push_configs.push_seq counts the config's events; each job of a new event takes the next number
-- (X-A2A-Push-Sequence). The writer holds the config row's lock (outbox_write_event locks the task's
-- configs), so numbers are given in commit order, with no gap but a superseded event.
-- delivery_jobs.ordered: the job waits for every earlier ordered job of its config (DELIVERY_ORDER
-- per_config when it was written). Jobs written before this migration are not ordered and carry no
-- number: they deliver as before, and hold nobody back.
-- delivery_jobs.held_by: the job ahead that held it back at its last check (the gauge
-- a2a_push_outbox_held); cleared when its first attempt starts.
-- delivery_jobs.wake_early: a new event found this job at the head of its config's line waiting for a
-- retry: its next call makes the attempt now (one attempt, counted as usual) instead of sleeping on.
-- delivery_jobs.early_taken: the head's last attempt was such an early one. A head gets at most one
-- early attempt per wait: a stream of events to a dead receiver cannot spend its attempts faster than
-- one early attempt per backoff step (at worst twice the retry schedule's pace); a scheduled attempt
-- clears it.
ALTER TABLE push_configs ADD COLUMN push_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE delivery_jobs ADD COLUMN push_seq bigint;
ALTER TABLE delivery_jobs ADD COLUMN ordered boolean NOT NULL DEFAULT false;
ALTER TABLE delivery_jobs ADD COLUMN held_by uuid;
ALTER TABLE delivery_jobs ADD COLUMN wake_early boolean NOT NULL DEFAULT false;
ALTER TABLE delivery_jobs ADD COLUMN early_taken boolean NOT NULL DEFAULT false;

-- Attempts on the wire (no outcome yet): few rows, read by every ordered job's first call.
CREATE INDEX delivery_attempts_open ON delivery_attempts (job_id) WHERE outcome IS NULL;
CREATE INDEX delivery_jobs_held ON delivery_jobs (held_by) WHERE held_by IS NOT NULL AND status = 'queued';

-- The outbox write (011) with the order: `p_ordered` (DELIVERY_ORDER=per_config) marks the new jobs
-- ordered and, for each config whose head waits for a retry, sets that head's wake_early and returns
-- it in o_woken (the API wakes it after the commit). Every new job takes its config's next number. A
-- caller of the old argument list (an API process of the previous version during an upgrade) writes
-- numbered, unordered jobs.
DROP FUNCTION outbox_write_event(text, text, text, text, double precision, text, double precision, integer, text);
CREATE FUNCTION outbox_write_event(
  p_tenant text, p_task text, p_kind text, p_body text, p_deadline_ms double precision,
  p_request_id text, p_lease_ms double precision, p_bound integer, p_traceparent text DEFAULT NULL,
  p_ordered boolean DEFAULT NULL,
  OUT o_event_id bigint, OUT o_job_ids uuid[], OUT o_config_ids text[], OUT o_urls text[],
  OUT o_superseded uuid[], OUT o_woken uuid[])
LANGUAGE plpgsql VOLATILE AS $$
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
  IF cardinality(row_ids) = 0 THEN RETURN; END IF;
  WITH u AS (
    UPDATE push_configs SET push_seq = push_seq + 1 WHERE row_id = ANY (row_ids) RETURNING row_id, push_seq)
  SELECT array_agg(u.push_seq ORDER BY u.row_id) INTO seqs FROM u;
  IF coalesce(p_ordered, false) THEN
    -- Heads waiting for a retry: the receiver may be back, the new event asks for one early attempt.
    WITH heads AS (
      SELECT DISTINCT ON (config_row_id) id, status FROM delivery_jobs
       WHERE config_row_id = ANY (row_ids) AND ordered AND status IN ('queued', 'in_flight', 'waiting_retry')
       ORDER BY config_row_id, seq),
    w AS (
      UPDATE delivery_jobs j SET wake_early = true FROM heads
       WHERE j.id = heads.id AND heads.status = 'waiting_retry' AND NOT j.wake_early AND NOT j.early_taken
      RETURNING j.id)
    SELECT coalesce(array_agg(id), '{}') INTO o_woken FROM w;
  END IF;
  INSERT INTO delivery_jobs (id, tenant_id, event_id, config_row_id, task_id, config_id, deadline,
                             request_id, traceparent, dispatch_lease, push_seq, ordered)
  SELECT j.id, p_tenant, o_event_id, j.row_id, p_task, j.config_id,
         created + make_interval(secs => p_deadline_ms / 1000), p_request_id, p_traceparent,
         CASE WHEN p_lease_ms IS NULL THEN NULL ELSE now() + make_interval(secs => p_lease_ms / 1000) END,
         j.push_seq, coalesce(p_ordered, false)
    FROM unnest(o_job_ids, row_ids, o_config_ids, seqs) WITH ORDINALITY AS j (id, row_id, config_id, push_seq, ord)
   ORDER BY j.ord;
  o_superseded := ARRAY(SELECT outbox_supersede_over_bound(row_ids, p_bound));
END $$;
