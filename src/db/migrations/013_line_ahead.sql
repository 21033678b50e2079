-- The rows of a config's line that can hold a job back (src/delivery/order.ts: heldBy), as one function,
-- so that the delivery activity reads them with the job's context in the same round trip, and the API's
-- delivery view asks the same question. Each part is one index lookup: the nearest earlier unfinished
-- ordered job, the line's head (the first unfinished one: its retry schedule bounds the recheck), and the
-- nearest earlier one with an attempt on the wire (no outcome yet, started less than p_on_wire_s before
-- p_now_ms, workflow time).
CREATE FUNCTION outbox_line_ahead(p_config bigint, p_seq bigint, p_now_ms bigint, p_on_wire_s double precision)
RETURNS TABLE (id uuid, seq bigint, status text, next_attempt_at timestamptz, open_attempt boolean)
LANGUAGE sql STABLE AS $$
  (SELECT j.id, j.seq, j.status, j.next_attempt_at,
          EXISTS (SELECT 1 FROM delivery_attempts a WHERE a.job_id = j.id AND a.outcome IS NULL)
     FROM delivery_jobs j
    WHERE j.config_row_id = p_config AND j.seq < p_seq AND j.ordered
      AND j.status IN ('queued', 'in_flight', 'waiting_retry')
    ORDER BY j.seq DESC LIMIT 1)
  UNION ALL
  (SELECT j.id, j.seq, j.status, j.next_attempt_at,
          EXISTS (SELECT 1 FROM delivery_attempts a WHERE a.job_id = j.id AND a.outcome IS NULL)
     FROM delivery_jobs j
    WHERE j.config_row_id = p_config AND j.seq < p_seq AND j.ordered
      AND j.status IN ('queued', 'in_flight', 'waiting_retry')
    ORDER BY j.seq LIMIT 1)
  UNION ALL
  (SELECT j.id, j.seq, j.status, j.next_attempt_at, true
     FROM delivery_attempts a JOIN delivery_jobs j ON j.id = a.job_id
    WHERE a.outcome IS NULL AND a.started_at > to_timestamp(p_now_ms / 1000.0) - make_interval(secs => p_on_wire_s)
      AND j.config_row_id = p_config AND j.seq < p_seq AND j.ordered
    ORDER BY j.seq DESC LIMIT 1)
$$;
