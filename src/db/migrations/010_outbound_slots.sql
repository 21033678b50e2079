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
    SELECT holder, tenant_id INTO w FROM outbound_waiters
     WHERE target = p_target AND tenant_id > cursor_tenant ORDER BY tenant_id, seq LIMIT 1;
    IF NOT FOUND THEN
      SELECT holder, tenant_id INTO w FROM outbound_waiters
       WHERE target = p_target ORDER BY tenant_id, seq LIMIT 1;
      EXIT WHEN NOT FOUND;
    END IF;
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = w.holder;
    INSERT INTO outbound_slots (target, holder, tenant_id, expires_at, granted)
      VALUES (p_target, w.holder, w.tenant_id, now() + make_interval(secs => p_grant_ms / 1000), true)
      ON CONFLICT (target, holder) DO NOTHING;
    cursor_tenant := w.tenant_id;
    live := live + 1;
    RETURN NEXT w.holder;
  END LOOP;
  UPDATE outbound_targets SET last_tenant = cursor_tenant
   WHERE target = p_target AND last_tenant IS DISTINCT FROM cursor_tenant;
END $$;

-- Takes a slot for `holder` (a slot granted to it, one it already holds, or a free one when nobody
-- waits ahead), or puts it in line. `o_granted` are other holders granted free slots meanwhile (a
-- grant lost with its signal), for the caller to wake. `o_suspect` says the target is in the slow
-- lane; with `p_refuse_suspect` (a call in the fast lane) such a call takes no slot and no place.
CREATE FUNCTION outbound_acquire(
  p_target text, p_holder text, p_tenant text, p_capacity integer, p_lease_ms double precision,
  p_wait_ms double precision, p_refuse_suspect boolean,
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
  DELETE FROM outbound_slots WHERE target = p_target AND expires_at < now();
  DELETE FROM outbound_waiters WHERE target = p_target AND expires_at < now();
  UPDATE outbound_slots SET expires_at = now() + make_interval(secs => p_lease_ms / 1000), granted = false
   WHERE target = p_target AND holder = p_holder;
  IF FOUND THEN
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
    o_acquired := true;
    RETURN;
  END IF;
  SELECT count(*) INTO live FROM outbound_slots WHERE target = p_target;
  IF live < p_capacity AND NOT EXISTS (
       SELECT 1 FROM outbound_waiters WHERE target = p_target AND holder <> p_holder) THEN
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
    INSERT INTO outbound_slots (target, holder, tenant_id, expires_at)
      VALUES (p_target, p_holder, p_tenant, now() + make_interval(secs => p_lease_ms / 1000));
    o_acquired := true;
    RETURN;
  END IF;
  -- In line (a waiter that comes back keeps its place), then any free slot goes to the line's head.
  INSERT INTO outbound_waiters (target, holder, tenant_id, expires_at)
    VALUES (p_target, p_holder, p_tenant, now() + make_interval(secs => p_wait_ms / 1000))
    ON CONFLICT (target, holder) DO UPDATE SET expires_at = excluded.expires_at;
  o_granted := ARRAY(SELECT outbound_grant(p_target, p_capacity, p_lease_ms));
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
  p_suspect_ms double precision)
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
  DELETE FROM outbound_slots WHERE target = p_target AND (holder = p_holder OR expires_at < now());
  DELETE FROM outbound_waiters WHERE target = p_target AND (holder = p_holder OR expires_at < now());
  RETURN QUERY SELECT outbound_grant(p_target, p_capacity, p_grant_ms);
END $$;
