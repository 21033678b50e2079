-- The inbox stores the callbacks that arrive together in one statement (group commit). Per callback,
-- the one-row store of migration 007 cost Postgres a statement, a registration row update and a commit
-- (about 0.46 ms of CPU each in bench 4); a batch pays those once per registration and once per batch.
--
-- Each element of the arrays is one callback: its registration, the credential hash the inbox matched,
-- the body's task id, kind and text. Answers one row per stored callback: its position in the input
-- (1-based), the registration's fields the signal needs, and the registration's unprocessed count with
-- this callback (1: it is the registration's first). A callback that is not stored has no row: its
-- registration is gone, ended or has another credential, or a bound is reached.
--
-- Bounds are exact as before: the registration rows are locked in id order first (two batches, or a
-- batch and a release, never wait on each other in a cycle), then counted from their latest values. The
-- callbacks of one registration are taken in input order up to its bound; the batch as a whole takes at
-- most the room left in the total (in input order, so a registration's admitted callbacks are always
-- its first ones). Concurrent batches may pass the total by at most what they store at that instant,
-- as with the one-row store: with 2 batches of at most 64 in flight per inbox process, 128 per process.
--
-- A registration row held by another transaction for more than lock_timeout (5 s, set for the
-- function only) fails the batch with 55P03 instead of stalling the inbox; the inbox then stores the
-- batch's callbacks one by one, so only the busy registration's callback is refused (503, retry).
CREATE FUNCTION inbox_store(
  p_registration uuid[], p_hash bytea[], p_task_id text[], p_kind text[], p_body text[],
  p_bound_registration integer, p_bound_total bigint)
RETURNS TABLE (ord integer, id uuid, tenant_id text, agent_url text, remote_task_id text, inbox_pending integer)
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
#variable_conflict use_column
DECLARE room bigint;
BEGIN
  PERFORM 1 FROM registrations r WHERE r.id = ANY (p_registration) ORDER BY r.id FOR UPDATE;
  room := greatest(p_bound_total - inbox_unprocessed_total(), 0);
  RETURN QUERY
  WITH input AS (
    SELECT t.ord::integer AS ord, t.registration_id, t.hash, t.task_id, t.kind, t.body
      FROM unnest(p_registration, p_hash, p_task_id, p_kind, p_body)
           WITH ORDINALITY AS t (registration_id, hash, task_id, kind, body, ord)),
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
    INSERT INTO inbox_callbacks (registration_id, body_task_id, kind, body)
    SELECT registration_id, task_id, kind, body FROM admitted ORDER BY ord
    RETURNING registration_id)
  SELECT a.ord, c.id, c.tenant_id, c.agent_url, c.remote_task_id, a.pending_with
    FROM admitted a JOIN counted c ON c.id = a.registration_id
   ORDER BY a.ord;
END $$;
