-- The inbox's total bound, counted in one row instead of a count(*) over every unprocessed callback
-- per request (which grew with the backlog and, under READ COMMITTED, let concurrent callbacks of
-- different registrations all pass the same count). A callback takes a slot with a conditional
-- increment in its own transaction, so the bound is exact; triggers give slots back whenever an
-- unprocessed row is marked processed or deleted, on every path (reconcile, resolve, delete, cascade).
CREATE TABLE inbox_pending (
  id      integer PRIMARY KEY CHECK (id = 1),
  pending bigint NOT NULL CHECK (pending >= 0)
);
INSERT INTO inbox_pending (id, pending)
  SELECT 1, count(*) FROM inbox_callbacks WHERE processed_at IS NULL;

CREATE FUNCTION inbox_pending_release_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE released bigint;
BEGIN
  SELECT count(*) INTO released FROM old_rows o JOIN new_rows n ON n.id = o.id
   WHERE o.processed_at IS NULL AND n.processed_at IS NOT NULL;
  IF released > 0 THEN
    UPDATE inbox_pending SET pending = greatest(pending - released, 0) WHERE id = 1;
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION inbox_pending_release_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE released bigint;
BEGIN
  SELECT count(*) INTO released FROM old_rows WHERE processed_at IS NULL;
  IF released > 0 THEN
    UPDATE inbox_pending SET pending = greatest(pending - released, 0) WHERE id = 1;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER inbox_pending_updated AFTER UPDATE ON inbox_callbacks
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION inbox_pending_release_updated();
CREATE TRIGGER inbox_pending_deleted AFTER DELETE ON inbox_callbacks
  REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION inbox_pending_release_deleted();
