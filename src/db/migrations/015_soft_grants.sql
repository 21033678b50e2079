-- Host isolation without a convoy (issues 19-21). Migration 010 reserved a freed slot for the next
-- waiter until it came (a grant), and sent every newcomer to the back of the line while anyone waited.
-- A waiter comes back through Temporal (a signal, a workflow task, an activity task: 50-300 ms under
-- load) while a healthy receiver's POST takes a few milliseconds, so a line once formed kept every slot
-- reserved and empty most of the time: benchmark 1 (100 configs at one receiver, bound 8) had 90 % of
-- its deliveries wait once, and ran at 8 ÷ the wake latency.
--
-- Now a target that is not in the slow lane (it neither timed out, refused nor was slow lately) keeps
-- its line work-conserving:
-- * a grant there is soft: it wakes the waiter, but does not keep the slot empty for it. A newcomer
--   (or a waiter back on its own) takes a slot whenever the calls on the wire and the firm grants leave
--   room, line or not;
-- * a soft grantee that comes back to a full target goes back in line at its old place, marked
--   `bumped`; its next grant is firm (reserved, as before), so a waiter loses at most one race;
-- * the bound itself does not move: calls on the wire plus firm grants never pass it.
-- A target in the slow lane (a dead or slow host, where slots really are full for seconds) keeps the
-- strict line of migration 010: every grant firm, nobody passes a waiter, round robin by tenant.

ALTER TABLE outbound_slots ADD COLUMN firm boolean NOT NULL DEFAULT true;
ALTER TABLE outbound_waiters ADD COLUMN bumped boolean NOT NULL DEFAULT false;

-- Slots of a target that count against its bound for a call that wants one: calls on the wire and
-- firm grants (a soft grant only says who was woken).
CREATE FUNCTION outbound_taken(p_target text, p_except text)
RETURNS integer LANGUAGE sql STABLE AS $$
  SELECT count(*)::integer FROM outbound_slots
   WHERE target = p_target AND holder IS DISTINCT FROM p_except AND (NOT granted OR firm)
$$;

CREATE OR REPLACE FUNCTION outbound_grant(p_target text, p_capacity integer, p_grant_ms double precision)
RETURNS SETOF text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  live integer;
  cursor_tenant text;
  in_slow_lane boolean;
  w record;
BEGIN
  -- Every slot row counts here, soft grants too: a release wakes at most as many waiters as there is
  -- room, not the whole line.
  SELECT count(*) INTO live FROM outbound_slots WHERE target = p_target;
  SELECT last_tenant, coalesce(suspect_until > now(), false) INTO cursor_tenant, in_slow_lane
    FROM outbound_targets WHERE target = p_target;
  WHILE live < p_capacity LOOP
    SELECT holder, tenant_id, seq, bumped INTO w FROM outbound_waiters
     WHERE target = p_target AND tenant_id > cursor_tenant ORDER BY tenant_id, seq LIMIT 1;
    IF NOT FOUND THEN
      SELECT holder, tenant_id, seq, bumped INTO w FROM outbound_waiters
       WHERE target = p_target ORDER BY tenant_id, seq LIMIT 1;
      EXIT WHEN NOT FOUND;
    END IF;
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = w.holder;
    INSERT INTO outbound_slots (target, holder, tenant_id, expires_at, granted, seq, firm)
      VALUES (p_target, w.holder, w.tenant_id, now() + make_interval(secs => p_grant_ms / 1000), true, w.seq,
              in_slow_lane OR w.bumped)
      ON CONFLICT (target, holder) DO NOTHING;
    cursor_tenant := w.tenant_id;
    live := live + 1;
    RETURN NEXT w.holder;
  END LOOP;
  UPDATE outbound_targets SET last_tenant = cursor_tenant
   WHERE target = p_target AND last_tenant IS DISTINCT FROM cursor_tenant;
END $$;

CREATE OR REPLACE FUNCTION outbound_acquire(
  p_target text, p_holder text, p_tenant text, p_capacity integer, p_lease_ms double precision,
  p_wait_ms double precision, p_refuse_suspect boolean, p_grant_ms double precision,
  OUT o_acquired boolean, OUT o_suspect boolean, OUT o_granted text[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  live integer;
  mine record;
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
  SELECT granted, firm, seq, tenant_id INTO mine FROM outbound_slots
   WHERE target = p_target AND holder = p_holder;
  IF FOUND AND mine.granted AND NOT mine.firm
     AND outbound_taken(p_target, p_holder) >= p_capacity THEN
    -- A soft grant whose room someone else took meanwhile: back in line at its place, firm next time.
    DELETE FROM outbound_slots WHERE target = p_target AND holder = p_holder;
    INSERT INTO outbound_waiters (target, holder, tenant_id, seq, expires_at, bumped)
      VALUES (p_target, p_holder, mine.tenant_id, mine.seq, now() + make_interval(secs => p_wait_ms / 1000), true)
      ON CONFLICT (target, holder) DO UPDATE SET expires_at = excluded.expires_at, bumped = true;
    o_granted := ARRAY(SELECT outbound_grant(p_target, p_capacity, p_grant_ms));
    o_acquired := p_holder = ANY(o_granted);
    IF o_acquired THEN
      UPDATE outbound_slots SET granted = false, expires_at = now() + make_interval(secs => p_lease_ms / 1000)
       WHERE target = p_target AND holder = p_holder;
      o_granted := array_remove(o_granted, p_holder);
    END IF;
    RETURN;
  END IF;
  IF FOUND THEN
    -- Its own call's slot (renewed) or a grant it may take.
    UPDATE outbound_slots SET expires_at = now() + make_interval(secs => p_lease_ms / 1000), granted = false
     WHERE target = p_target AND holder = p_holder;
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
    -- Room the expired rows freed goes to the line.
    o_granted := ARRAY(SELECT outbound_grant(p_target, p_capacity, p_grant_ms));
    o_acquired := true;
    RETURN;
  END IF;
  IF o_suspect THEN
    -- The slow lane's strict line: a free slot only when nobody waits ahead.
    SELECT count(*) INTO live FROM outbound_slots WHERE target = p_target;
    o_acquired := live < p_capacity AND NOT EXISTS (
      SELECT 1 FROM outbound_waiters WHERE target = p_target AND holder <> p_holder);
  ELSE
    -- Work-conserving: room on the wire is taken, line or not.
    o_acquired := outbound_taken(p_target, NULL) < p_capacity;
  END IF;
  IF o_acquired THEN
    DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
    INSERT INTO outbound_slots (target, holder, tenant_id, expires_at)
      VALUES (p_target, p_holder, p_tenant, now() + make_interval(secs => p_lease_ms / 1000));
    -- Served: the round robin goes on after this tenant (no write while one tenant uses the target).
    UPDATE outbound_targets SET last_tenant = p_tenant WHERE target = p_target AND last_tenant <> p_tenant;
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

-- A grant its waiter did not take in time goes back in line at its old place, firm next time.
CREATE OR REPLACE FUNCTION outbound_expire(p_target text, p_wait_ms double precision)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  INSERT INTO outbound_waiters (target, holder, tenant_id, seq, expires_at, bumped)
    SELECT target, holder, tenant_id, seq, now() + make_interval(secs => p_wait_ms / 1000), true
      FROM outbound_slots
     WHERE target = p_target AND granted AND seq IS NOT NULL AND expires_at < now()
    ON CONFLICT (target, holder) DO NOTHING;
  DELETE FROM outbound_slots WHERE target = p_target AND expires_at < now();
  DELETE FROM outbound_waiters WHERE target = p_target AND expires_at < now();
END $$;
