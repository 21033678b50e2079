-- Trace context (src/tracing.ts), kept as the request id is: a job keeps the `traceparent` of the API
-- request that wrote it, so a workflow started later by a dispatcher's claim or sweep joins that
-- request's trace; a stored callback keeps its own request's, so the reconcile that covers it links to
-- it. NULL while tracing is off. Both writes are one statement each (migrations 006, 008): they are
-- redefined here with one more argument (NULL by default, so a call without it still works), the same
-- steps otherwise.
ALTER TABLE delivery_jobs ADD COLUMN traceparent text;
ALTER TABLE inbox_callbacks ADD COLUMN traceparent text;

DROP FUNCTION outbox_write_event(text, text, text, text, double precision, text, double precision, integer);
CREATE FUNCTION outbox_write_event(
  p_tenant text, p_task text, p_kind text, p_body text, p_deadline_ms double precision,
  p_request_id text, p_lease_ms double precision, p_bound integer, p_traceparent text DEFAULT NULL,
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
                             request_id, traceparent, dispatch_lease)
  SELECT j.id, p_tenant, o_event_id, j.row_id, p_task, j.config_id,
         created + make_interval(secs => p_deadline_ms / 1000), p_request_id, p_traceparent,
         CASE WHEN p_lease_ms IS NULL THEN NULL ELSE now() + make_interval(secs => p_lease_ms / 1000) END
    FROM unnest(o_job_ids, row_ids, o_config_ids) WITH ORDINALITY AS j (id, row_id, config_id, ord)
   ORDER BY j.ord;
  o_superseded := ARRAY(SELECT outbox_supersede_over_bound(row_ids, p_bound));
END $$;

DROP FUNCTION inbox_store(uuid[], bytea[], text[], text[], text[], integer, bigint);
CREATE FUNCTION inbox_store(
  p_registration uuid[], p_hash bytea[], p_task_id text[], p_kind text[], p_body text[],
  p_bound_registration integer, p_bound_total bigint, p_traceparent text[] DEFAULT NULL)
RETURNS TABLE (ord integer, id uuid, tenant_id text, agent_url text, remote_task_id text, inbox_pending integer)
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
#variable_conflict use_column
DECLARE room bigint;
BEGIN
  PERFORM 1 FROM registrations r WHERE r.id = ANY (p_registration) ORDER BY r.id FOR UPDATE;
  room := greatest(p_bound_total - inbox_unprocessed_total(), 0);
  RETURN QUERY
  WITH input AS (
    SELECT t.ord::integer AS ord, t.registration_id, t.hash, t.task_id, t.kind, t.body, t.traceparent
      FROM unnest(p_registration, p_hash, p_task_id, p_kind, p_body, p_traceparent)
           WITH ORDINALITY AS t (registration_id, hash, task_id, kind, body, traceparent, ord)),
  ranked AS (
    SELECT i.*, (r.inbox_pending + row_number() OVER (PARTITION BY i.registration_id ORDER BY i.ord))::integer AS pending_with
      FROM input i
      JOIN registrations r ON r.id = i.registration_id AND r.callback_hash = i.hash
                          AND r.status IN ('pending', 'active')),
  admitted AS (
    SELECT * FROM ranked WHERE pending_with <= p_bound_registration ORDER BY ord LIMIT room),
  counted AS (
    UPDATE registrations r
       SET inbox_pending = r.inbox_pending + a.n, callbacks_received = r.callbacks_received + a.n
      FROM (SELECT registration_id, count(*)::integer AS n FROM admitted GROUP BY registration_id) a
     WHERE r.id = a.registration_id
    RETURNING r.id, r.tenant_id, r.agent_url, r.remote_task_id),
  stored AS (
    INSERT INTO inbox_callbacks (registration_id, body_task_id, kind, body, traceparent)
    SELECT registration_id, task_id, kind, body, traceparent FROM admitted ORDER BY ord
    RETURNING registration_id)
  SELECT a.ord, c.id, c.tenant_id, c.agent_url, c.remote_task_id, a.pending_with
    FROM admitted a JOIN counted c ON c.id = a.registration_id
   ORDER BY a.ord;
END $$;
