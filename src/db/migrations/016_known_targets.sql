-- The fast lane is for targets known to answer (issues 19, 21). A first contact with a dead host used
-- to run in the fast lane for one DELIVERY_TIMEOUT before the timeout marked it for the slow lane: 50
-- new dead hosts × 8 such attempts took the classic type's 200 activity slots for 15 s (benchmark 9
-- (b), quick), and as the lean type's local activities, which keep their workflow task until the POST
-- answers, 400 of 300 workflow task slots. So a fast-lane call takes a slot only at a target with a 2xx
-- within `p_known_ms`; any other target is refused before its slot, with no attempt used, and the
-- attempt runs in the slow lane (its own task queue and bounded worker slots), where a 2xx makes the
-- target known.

-- When the target last answered a 2xx (moved at most once a minute: the row is every call's lock).
ALTER TABLE outbound_targets ADD COLUMN healthy_at timestamptz;

CREATE OR REPLACE FUNCTION outbound_release(
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
    UPDATE outbound_targets SET suspect_until = NULL, healthy_at = now()
     WHERE target = p_target
       AND (suspect_until IS NOT NULL OR healthy_at IS NULL OR healthy_at < now() - interval '1 minute');
  END IF;
  DELETE FROM outbound_slots WHERE target = p_target AND holder = p_holder;
  DELETE FROM outbound_waiters WHERE target = p_target AND holder = p_holder;
  PERFORM outbound_expire(p_target, p_wait_ms);
  RETURN QUERY SELECT outbound_grant(p_target, p_capacity, p_grant_ms);
END $$;

-- outbox_attempt_begin for a fast-lane call (`p_known_ms` not null): a target in the slow lane, or
-- without a 2xx within `p_known_ms`, takes no slot and no place and starts nothing (`o_suspect`, or
-- `o_unknown`); the caller moves the attempt to the slow lane. Otherwise as before.
CREATE FUNCTION outbox_attempt_begin(
  p_job uuid, p_n integer, p_now_ms bigint, p_config bigint, p_early boolean,
  p_target text, p_holder text, p_tenant text, p_refuse_suspect boolean,
  p_capacity integer, p_lease_ms double precision, p_slot_wait_ms double precision,
  p_grant_ms double precision, p_suspect_ms double precision, p_known_ms double precision,
  OUT o_started boolean, OUT o_acquired boolean, OUT o_suspect boolean, OUT o_granted text[],
  OUT o_unknown boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  t record;
BEGIN
  o_unknown := false;
  IF p_known_ms IS NOT NULL AND p_target IS NOT NULL THEN
    SELECT coalesce(suspect_until > now(), false) AS suspect,
           coalesce(healthy_at > now() - make_interval(secs => p_known_ms / 1000), false) AS known
      INTO t FROM outbound_targets WHERE target = p_target;
    IF NOT FOUND OR t.suspect OR NOT t.known THEN
      o_started := false;
      o_acquired := false;
      o_suspect := coalesce(t.suspect, false);
      o_unknown := NOT o_suspect;
      o_granted := '{}';
      RETURN;
    END IF;
  END IF;
  SELECT b.o_started, b.o_acquired, b.o_suspect, b.o_granted INTO o_started, o_acquired, o_suspect, o_granted
    FROM outbox_attempt_begin(p_job, p_n, p_now_ms, p_config, p_early, p_target, p_holder, p_tenant,
                              p_refuse_suspect, p_capacity, p_lease_ms, p_slot_wait_ms, p_grant_ms,
                              p_suspect_ms) b;
END $$;
