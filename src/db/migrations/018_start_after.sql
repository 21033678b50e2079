-- First contacts are admitted at a bounded rate per tenant (issue 19). A job whose first attempt goes
-- to the slow lane (its target has no 2xx within 10 minutes, or is suspect) costs four Temporal round
-- trips to start and join its target's line, and a tenant writing 1,000 of them at once (benchmark 9
-- (a), (b)) spent them all in three seconds: the dev server, Postgres and the worker were saturated
-- and every other tenant's deliveries waited in each stage. The dispatcher now starts such jobs at
-- SLOW_LANE_START_RATE per tenant (src/api/dispatcher.ts) and gives each one it holds back the time
-- its turn comes: `start_after`. A claim run skips a job until then, and starts it then without asking
-- again (it had its turn). Its target's line takes attempts at OUTBOUND_HOST_CONCURRENCY per
-- DELIVERY_TIMEOUT anyway, so holding it back costs a dead host's jobs nothing.
ALTER TABLE delivery_jobs ADD COLUMN start_after timestamptz;
