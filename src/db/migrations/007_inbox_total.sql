-- The inbox's total bound without a row written per callback. The 16 stripe rows of migration 005 cost
-- every callback an UPDATE of a hot row and a sum over the stripes: about a third of Postgres's CPU
-- per callback (bench 4). Every stored callback already takes the next value of the table's id
-- sequence, which is not transactional and needs no row lock, so
--     unprocessed callbacks = ids handed out − callbacks released − base
-- where `released` counts callbacks processed or deleted while unprocessed (the triggers of 005, at the
-- rate of reconciliation, not of callbacks) and `base` the ids that are not unprocessed rows for any
-- other reason (rows older than this migration, ids of inserts that rolled back, the values a crash
-- skips). Those gaps only make the count too high (a 429 early, never a bound passed); the daily
-- cleanup recounts exactly (inbox_total_recount) and so removes them. As with the stripes, concurrent
-- callbacks may pass the total by at most the number being stored at that instant.

CREATE TABLE inbox_total (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  released bigint NOT NULL,
  base     bigint NOT NULL
);

-- Ids the callbacks' sequence has handed out (1, 2, … from 1; last_value is 1 before the first call).
CREATE FUNCTION inbox_ids_issued() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM inbox_callbacks_id_seq
$$;

-- Unprocessed callbacks in all, as the inbox checks it.
CREATE FUNCTION inbox_unprocessed_total() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT inbox_ids_issued() - released - base FROM inbox_total
$$;

-- Sets `base` from an exact count, with writers of callbacks held off meanwhile (they wait for it).
CREATE FUNCTION inbox_total_recount() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  LOCK TABLE inbox_callbacks IN SHARE ROW EXCLUSIVE MODE;
  SELECT count(*) INTO n FROM inbox_callbacks WHERE processed_at IS NULL;
  UPDATE inbox_total SET base = inbox_ids_issued() - released - n;
  RETURN n;
END $$;

LOCK TABLE inbox_callbacks IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO inbox_total (released, base)
SELECT 0, inbox_ids_issued() - (SELECT count(*) FROM inbox_callbacks WHERE processed_at IS NULL);

-- Releases now count into inbox_total (same lock order as before: registration rows, then this row).
CREATE OR REPLACE FUNCTION inbox_pending_release(released jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE total bigint;
BEGIN
  UPDATE registrations r SET inbox_pending = greatest(r.inbox_pending - x.n, 0)
    FROM (SELECT key::uuid AS id, value::int AS n FROM jsonb_each_text(released)) x
   WHERE r.id = x.id;
  SELECT coalesce(sum(value::bigint), 0) INTO total FROM jsonb_each_text(released);
  IF total > 0 THEN
    UPDATE inbox_total SET released = inbox_total.released + total;
  END IF;
END $$;

DROP TABLE inbox_pending_stripes;
