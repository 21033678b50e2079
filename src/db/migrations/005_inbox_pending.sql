-- The inbox's bounds as counters instead of a count(*) over the unprocessed callbacks per request
-- (which grew with the backlog). Per registration: a column on the registration row, which the
-- callback's conditional UPDATE locks, so that bound is exact. In total: 16 stripe rows, one taken at
-- random per callback and summed for the check, so callbacks do not queue on one hot row; the total
-- may be passed by at most the number of callbacks being stored at that instant. Triggers give the
-- counts back whenever an unprocessed row is marked processed or deleted, on every path (reconcile,
-- resolve, delete, cascade).
ALTER TABLE registrations ADD COLUMN inbox_pending integer NOT NULL DEFAULT 0;
UPDATE registrations r
   SET inbox_pending = c.n
  FROM (SELECT registration_id, count(*) AS n FROM inbox_callbacks WHERE processed_at IS NULL GROUP BY 1) c
 WHERE c.registration_id = r.id;

CREATE TABLE inbox_pending_stripes (
  stripe  integer PRIMARY KEY CHECK (stripe BETWEEN 0 AND 15),
  pending bigint NOT NULL
);
INSERT INTO inbox_pending_stripes (stripe, pending) SELECT s, 0 FROM generate_series(0, 15) s;
UPDATE inbox_pending_stripes
   SET pending = (SELECT count(*) FROM inbox_callbacks WHERE processed_at IS NULL) WHERE stripe = 0;

-- Gives back `released` rows per registration (registration row first, then a stripe: the same lock
-- order as a callback's insert).
CREATE FUNCTION inbox_pending_release(released jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE total bigint;
BEGIN
  UPDATE registrations r SET inbox_pending = greatest(r.inbox_pending - x.n, 0)
    FROM (SELECT key::uuid AS id, value::int AS n FROM jsonb_each_text(released)) x
   WHERE r.id = x.id;
  SELECT coalesce(sum(value::bigint), 0) INTO total FROM jsonb_each_text(released);
  IF total > 0 THEN
    UPDATE inbox_pending_stripes SET pending = pending - total WHERE stripe = 0;
  END IF;
END $$;

CREATE FUNCTION inbox_pending_release_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE released jsonb;
BEGIN
  SELECT jsonb_object_agg(registration_id, n) INTO released FROM (
    SELECT o.registration_id, count(*) AS n FROM old_rows o JOIN new_rows nw ON nw.id = o.id
     WHERE o.processed_at IS NULL AND nw.processed_at IS NOT NULL GROUP BY 1) x;
  IF released IS NOT NULL THEN PERFORM inbox_pending_release(released); END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION inbox_pending_release_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE released jsonb;
BEGIN
  SELECT jsonb_object_agg(registration_id, n) INTO released FROM (
    SELECT registration_id, count(*) AS n FROM old_rows WHERE processed_at IS NULL GROUP BY 1) x;
  IF released IS NOT NULL THEN PERFORM inbox_pending_release(released); END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER inbox_pending_updated AFTER UPDATE ON inbox_callbacks
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION inbox_pending_release_updated();
CREATE TRIGGER inbox_pending_deleted AFTER DELETE ON inbox_callbacks
  REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION inbox_pending_release_deleted();
