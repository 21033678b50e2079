-- Host isolation (issue 19): at most `capacity` calls to one target (host or literal address, plus
-- port) on the wire at once, across every worker. A call holds a slot (a lease, renewed while the
-- call runs, so a killed worker's slot comes back when the lease runs out); a call that finds its
-- target full waits in line (a waiter row) without holding anything, and a released slot is handed
-- to the next waiter at once (a grant: a slot row marked granted, which the waiter takes when it
-- comes back), round robin by tenant, each tenant's waiters in the order they came.

CREATE TABLE outbound_targets (
  target        text PRIMARY KEY,
  -- The tenant served last from this target's line: the round robin's cursor.
  last_tenant   text NOT NULL DEFAULT '',
  -- Set when a call to the target timed out, could not connect or was slow: its calls run in the
  -- slow lane until then (a 2xx clears it).
  suspect_until timestamptz
);

CREATE TABLE outbound_slots (
  target     text NOT NULL,
  holder     text NOT NULL,
  tenant_id  text NOT NULL,
  expires_at timestamptz NOT NULL,
  granted    boolean NOT NULL DEFAULT false,
  -- A granted slot keeps its waiter's place: a grant not taken in time goes back in line there.
  seq        bigint,
  PRIMARY KEY (target, holder)
);

CREATE TABLE outbound_waiters (
  target     text NOT NULL,
  holder     text NOT NULL,
  tenant_id  text NOT NULL,
  seq        bigserial NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (target, holder)
);
CREATE INDEX outbound_waiters_line ON outbound_waiters (target, tenant_id, seq);

-- Hands free slots of a locked target to its waiters, round robin by tenant. Returns the holders
-- granted (the caller wakes them).
CREATE FUNCTION outbound_grant(p_target text, p_capacity integer, p_grant_ms double precision)
RETURNS SETOF text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  live integer;
  cursor_tenant text;
  w record;
BEGIN
  SELECT count(*) INTO live FROM outbound_slots WHERE target = p_target;
  SELECT last_tenant INTO cursor_tenant FROM outbound_targets WHERE target = p_target;
  WHILE live < p_capacity LOOP
    SELECT holder, tenant_id, seq INTO w FROM outbound_waiters
     WHERE target = p_target AND tenant_id > cursor_tenant ORDER BY tenant_id, seq LIMIT 1;
    IF NOT FOUND THEN
      SELECT holder, tenant_id, seq INTO w FROM outbound_waiters
       WHERE target = p_target ORDER BY tenant_id, seq LIMIT 1;
      EXIT WHEN NOT FOUND;
    END IF;
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = w.holder;
    INSERT INTO outbound_slots (target, holder, tenant_id, expires_at, granted, seq)
      VALUES (p_target, w.holder, w.tenant_id, now() + make_interval(secs => p_grant_ms / 1000), true, w.seq)
      ON CONFLICT (target, holder) DO NOTHING;
    cursor_tenant := w.tenant_id;
    live := live + 1;
    RETURN NEXT w.holder;
  END LOOP;
  UPDATE outbound_targets SET last_tenant = cursor_tenant
   WHERE target = p_target AND last_tenant IS DISTINCT FROM cursor_tenant;
END $$;

-- Drops a locked target's expired leases and places. A grant its waiter did not take in time goes
-- back in line at its old place (its waiter may be slow to come, e.g. behind a busy slow lane).
CREATE FUNCTION outbound_expire(p_target text, p_wait_ms double precision)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  INSERT INTO outbound_waiters (target, holder, tenant_id, seq, expires_at)
    SELECT target, holder, tenant_id, seq, now() + make_interval(secs => p_wait_ms / 1000)
      FROM outbound_slots
     WHERE target = p_target AND granted AND seq IS NOT NULL AND expires_at < now()
    ON CONFLICT (target, holder) DO NOTHING;
  DELETE FROM outbound_slots WHERE target = p_target AND expires_at < now();
  DELETE FROM outbound_waiters WHERE target = p_target AND expires_at < now();
END $$;

-- Takes a slot for `holder` (a slot granted to it, one it already holds, or a free one when nobody
-- waits ahead), or puts it in line. `o_granted` are other holders granted free slots meanwhile (a
-- grant lost with its signal), for the caller to wake. `o_suspect` says the target is in the slow
-- lane; with `p_refuse_suspect` (a call in the fast lane) such a call takes no slot and no place.
CREATE FUNCTION outbound_acquire(
  p_target text, p_holder text, p_tenant text, p_capacity integer, p_lease_ms double precision,
  p_wait_ms double precision, p_refuse_suspect boolean, p_grant_ms double precision,
  OUT o_acquired boolean, OUT o_suspect boolean, OUT o_granted text[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  live integer;
BEGIN
  o_granted := '{}';
  INSERT INTO outbound_targets (target) VALUES (p_target) ON CONFLICT (target) DO NOTHING;
  SELECT coalesce(suspect_until > now(), false) INTO o_suspect
    FROM outbound_targets WHERE target = p_target FOR UPDATE;
  -- A call in the fast lane to a target in the slow lane takes nothing: it moves to the slow lane.
  IF o_suspect AND p_refuse_suspect THEN
    o_acquired := false;
    RETURN;
  END IF;
  PERFORM outbound_expire(p_target, p_wait_ms);
  UPDATE outbound_slots SET expires_at = now() + make_interval(secs => p_lease_ms / 1000), granted = false
   WHERE target = p_target AND holder = p_holder;
  IF FOUND THEN
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
    -- Room the expired rows freed goes to the line.
    o_granted := ARRAY(SELECT outbound_grant(p_target, p_capacity, p_grant_ms));
    o_acquired := true;
    RETURN;
  END IF;
  SELECT count(*) INTO live FROM outbound_slots WHERE target = p_target;
  IF live < p_capacity AND NOT EXISTS (
       SELECT 1 FROM outbound_waiters WHERE target = p_target AND holder <> p_holder) THEN
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
    INSERT INTO outbound_slots (target, holder, tenant_id, expires_at)
      VALUES (p_target, p_holder, p_tenant, now() + make_interval(secs => p_lease_ms / 1000));
    -- Served: the round robin goes on after this tenant (no write while one tenant uses the target).
    UPDATE outbound_targets SET last_tenant = p_tenant WHERE target = p_target AND last_tenant <> p_tenant;
    o_acquired := true;
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

-- Gives back `holder`'s slot (or its place in line) and hands free slots to the next waiters.
-- `p_outcome`: 'healthy' clears the target's slow-lane mark, 'suspect' sets it for p_suspect_ms.
CREATE FUNCTION outbound_release(
  p_target text, p_holder text, p_capacity integer, p_grant_ms double precision, p_outcome text,
  p_suspect_ms double precision, p_wait_ms double precision)
RETURNS SETOF text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM 1 FROM outbound_targets WHERE target = p_target FOR UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  IF p_outcome = 'suspect' THEN
    UPDATE outbound_targets SET suspect_until = now() + make_interval(secs => p_suspect_ms / 1000)
     WHERE target = p_target;
  ELSIF p_outcome = 'healthy' THEN
    UPDATE outbound_targets SET suspect_until = NULL WHERE target = p_target AND suspect_until IS NOT NULL;
  END IF;
  DELETE FROM outbound_slots WHERE target = p_target AND holder = p_holder;
  DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
  PERFORM outbound_expire(p_target, p_wait_ms);
  RETURN QUERY SELECT outbound_grant(p_target, p_capacity, p_grant_ms);
END $$;

-- Config health (CONFIG_FAILING_AFTER): the time of the config's last 2xx or, before its first one,
-- of its first attempt (workflow time). Set at the first attempt, moved by a 2xx (at most once a
-- minute per config), read when a job ends without a 2xx. On the config row, so the check that stops
-- a config waits for a 2xx being recorded on it. Configs made before this migration start from their
-- attempts.
ALTER TABLE push_configs ADD COLUMN health_since timestamptz;
UPDATE push_configs c SET health_since = s.since
  FROM (SELECT j.config_row_id,
               coalesce(max(a.started_at) FILTER (WHERE a.outcome = 'delivered'), min(a.started_at)) AS since
          FROM delivery_attempts a JOIN delivery_jobs j ON j.id = a.job_id GROUP BY j.config_row_id) s
 WHERE c.row_id = s.config_row_id;
