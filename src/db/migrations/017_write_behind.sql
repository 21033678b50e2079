-- Held jobs cost one workflow task, not an activity (issues 19-21). A job written behind an unfinished
-- earlier job of its config (DELIVERY_ORDER=per_config) used to start, run an attempt activity only to
-- learn it was held, and wait for the wake: a second workflow task and an activity per held job, which
-- made a tenant's burst over few configs a burst of Temporal work for everyone (benchmark 9 (d)).
-- The write now answers, per new job, the job it is behind (`o_behind`, the nearest earlier unfinished
-- ordered job of its config) and records it as `held_by` (the gauge a2a_push_outbox_held); the
-- dispatcher starts such a job with `behind` in its input, and the workflow waits for its wake before
-- its first attempt call (src/workflows/delivery.ts). The activity still decides: a woken job whose
-- line is still busy waits again, as before.
DROP FUNCTION outbox_write_event(text, text, text, text, double precision, text, double precision, integer, text, boolean);
CREATE FUNCTION outbox_write_event(
  p_tenant text, p_task text, p_kind text, p_body text, p_deadline_ms double precision,
  p_request_id text, p_lease_ms double precision, p_bound integer, p_traceparent text DEFAULT NULL,
  p_ordered boolean DEFAULT NULL,
  OUT o_event_id bigint, OUT o_job_ids uuid[], OUT o_config_ids text[], OUT o_urls text[],
  OUT o_superseded uuid[], OUT o_woken uuid[], OUT o_behind uuid[])
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
  o_behind := '{}';
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
    -- Each new job's nearest earlier unfinished job of its config (null: it heads its line). The
    -- config rows are locked, so no job of these configs is written meanwhile.
    o_behind := ARRAY(
      SELECT (SELECT d.id FROM delivery_jobs d
                WHERE d.config_row_id = r.row_id AND d.ordered
                  AND d.status IN ('queued', 'in_flight', 'waiting_retry')
                ORDER BY d.seq DESC LIMIT 1)
        FROM unnest(row_ids) WITH ORDINALITY AS r (row_id, ord) ORDER BY r.ord);
  ELSE
    o_behind := ARRAY(SELECT NULL::uuid FROM generate_series(1, cardinality(row_ids)));
  END IF;
  INSERT INTO delivery_jobs (id, tenant_id, event_id, config_row_id, task_id, config_id, deadline,
                             request_id, traceparent, dispatch_lease, push_seq, ordered, held_by)
  SELECT j.id, p_tenant, o_event_id, j.row_id, p_task, j.config_id,
         created + make_interval(secs => p_deadline_ms / 1000), p_request_id, p_traceparent,
         CASE WHEN p_lease_ms IS NULL THEN NULL ELSE now() + make_interval(secs => p_lease_ms / 1000) END,
         j.push_seq, coalesce(p_ordered, false), j.behind
    FROM unnest(o_job_ids, row_ids, o_config_ids, seqs, o_behind)
         WITH ORDINALITY AS j (id, row_id, config_id, push_seq, behind, ord)
   ORDER BY j.ord;
  o_superseded := ARRAY(SELECT outbox_supersede_over_bound(row_ids, p_bound));
END $$;
