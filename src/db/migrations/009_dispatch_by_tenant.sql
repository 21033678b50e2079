-- The dispatcher's claim takes committed jobs round robin by tenant, each tenant's in commit order
-- (src/api/dispatcher.ts): it walks the tenants that have undispatched jobs and reads each one's
-- oldest few. Both walks run on this index; the claim no longer reads undispatched jobs by `seq`
-- alone, so the index that served it goes.
CREATE INDEX delivery_jobs_undispatched_tenant ON delivery_jobs (tenant_id, seq) WHERE dispatched_at IS NULL;
DROP INDEX delivery_jobs_undispatched;
