-- Foreign keys that retention deletes through: without these, each deleted job or event scans delivery_jobs.
CREATE INDEX delivery_jobs_retry_of ON delivery_jobs (retry_of) WHERE retry_of IS NOT NULL;
CREATE INDEX delivery_jobs_event ON delivery_jobs (event_id);
