-- The request id of the API call that wrote a job, carried into its workflow and activities' logs.
ALTER TABLE delivery_jobs ADD COLUMN request_id text;
