-- The outbox write in one round trip. An event write was BEGIN, the event and its jobs, the bound,
-- COMMIT: four round trips inside the request (bench 7: write → first attempt). As a function it is
-- one statement (autocommit when no Idempotency-Key asks for a transaction around it), with the same
-- steps and the same exactness: each statement of a VOLATILE PL/pgSQL function takes a fresh
-- snapshot, so the bound, counted after the configs are locked, sees every job of a writer that held
-- the lock before.

-- Marks the oldest unfinished jobs of each config superseded while a config holds more than `bound`.
CREATE FUNCTION outbox_supersede_over_bound(config_row_ids bigint[], bound integer) RETURNS SETOF uuid
LANGUAGE sql VOLATILE AS $$
  WITH ranked AS (
    SELECT id, row_number() OVER (PARTITION BY config_row_id ORDER BY seq DESC) AS rn
      FROM delivery_jobs
     WHERE config_row_id = ANY(config_row_ids) AND status IN ('queued', 'in_flight', 'waiting_retry'))
  UPDATE delivery_jobs j SET status = 'superseded', finished_at = now(), next_attempt_at = NULL
    FROM ranked WHERE j.id = ranked.id AND ranked.rn > bound
  RETURNING j.id
$$;

-- The event, one job per active config of its task (the configs locked first: writers of one config
-- queue here, which makes the bound exact), then the bound. `lease_ms` marks the jobs as being
-- started by the writing process (the dispatcher's direct start); NULL leaves them to a claim run.
CREATE FUNCTION outbox_write_event(
  p_tenant text, p_task text, p_kind text, p_body text, p_deadline_ms double precision,
  p_request_id text, p_lease_ms double precision, p_bound integer,
  OUT o_event_id bigint, OUT o_job_ids uuid[], OUT o_config_ids text[], OUT o_urls text[],
  OUT o_superseded uuid[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  created timestamptz;
  row_ids bigint[];
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
  IF cardinality(row_ids) = 0 THEN RETURN; END IF;
  INSERT INTO delivery_jobs (id, tenant_id, event_id, config_row_id, task_id, config_id, deadline,
                             request_id, dispatch_lease)
  SELECT j.id, p_tenant, o_event_id, j.row_id, p_task, j.config_id,
         created + make_interval(secs => p_deadline_ms / 1000), p_request_id,
         CASE WHEN p_lease_ms IS NULL THEN NULL ELSE now() + make_interval(secs => p_lease_ms / 1000) END
    FROM unnest(o_job_ids, row_ids, o_config_ids) WITH ORDINALITY AS j (id, row_id, config_id, ord)
   ORDER BY j.ord;
  o_superseded := ARRAY(SELECT outbox_supersede_over_bound(row_ids, p_bound));
END $$;
