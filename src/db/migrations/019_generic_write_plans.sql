-- The event write plans its statements once per connection (issue 21). Postgres chose a custom plan on
-- every call for three of outbox_write_event's statements (the `= ANY (row_ids)` ones: a custom plan
-- knows the array's length, so its estimate always beat the generic one), 0.17 ms of planning per
-- write against 0.08 ms of running them (pg_stat_statements, benchmark 1). The generic plans are the
-- same index scans. A later migration that re-creates the function must say this again: CREATE
-- FUNCTION starts without it.
ALTER FUNCTION outbox_write_event(text, text, text, text, double precision, text, double precision, integer, text, boolean)
  SET plan_cache_mode = force_generic_plan;
