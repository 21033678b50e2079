-- The next job of a line joins its target's line without a wake (issues 19, 20). Under a tenant's burst
-- over many configs to one host (benchmark 9 (d): 100 lines, bound 8) each delivery used to wake the
-- next job of its config, whose attempt found the host full (the slot just freed soft-granted to the
-- line's head) and joined the line: a signal, two workflow tasks and an activity for nothing, and a
-- race with the woken head. Now, after a 2xx, the ending attempt puts the next job of its config in
-- the target's line itself when someone already waits there (the line is the queue it would join), and
-- that job is woken by its grant. With nobody waiting, or a target in the slow lane, `o_joined` is
-- false and the caller wakes it as before (it takes a free slot on its own).
CREATE FUNCTION outbound_join_line(
  p_target text, p_holder text, p_tenant text, p_capacity integer, p_wait_ms double precision,
  p_grant_ms double precision, OUT o_joined boolean, OUT o_granted text[])
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  o_joined := false;
  o_granted := '{}';
  PERFORM 1 FROM outbound_targets WHERE target = p_target AND coalesce(suspect_until <= now(), true) FOR UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  PERFORM outbound_expire(p_target, p_wait_ms);
  IF NOT EXISTS (SELECT 1 FROM outbound_waiters WHERE target = p_target AND holder <> p_holder) THEN RETURN; END IF;
  INSERT INTO outbound_waiters (target, holder, tenant_id, expires_at)
    VALUES (p_target, p_holder, p_tenant, now() + make_interval(secs => p_wait_ms / 1000))
    ON CONFLICT (target, holder) DO UPDATE SET expires_at = excluded.expires_at;
  o_joined := true;
  -- Room free meanwhile goes to the line's head, as after any change of the line.
  o_granted := ARRAY(SELECT outbound_grant(p_target, p_capacity, p_grant_ms));
END $$;
