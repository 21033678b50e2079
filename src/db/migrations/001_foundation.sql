-- Tenants and their API keys (stored as SHA-256 of the key; the key itself is shown once).
CREATE TABLE tenants (
  id         text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
  id         text PRIMARY KEY,
  tenant_id  text NOT NULL REFERENCES tenants (id),
  key_hash   bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);

-- Every secret the service must send somewhere, sealed with AES-256-GCM under a key id of the keyring.
CREATE TABLE sealed_secrets (
  id         bigserial PRIMARY KEY,
  tenant_id  text NOT NULL REFERENCES tenants (id),
  purpose    text NOT NULL CHECK (purpose IN ('push_credential', 'agent_token')),
  key_id     text NOT NULL,
  iv         bytea NOT NULL CHECK (length(iv) = 12),
  ciphertext bytea NOT NULL,
  tag        bytea NOT NULL CHECK (length(tag) = 16),
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Push configs. row_id is the identity jobs hang on: a deleted config's id may be reused by a new row.
CREATE TABLE push_configs (
  row_id            bigserial PRIMARY KEY,
  tenant_id         text NOT NULL REFERENCES tenants (id),
  task_id           text NOT NULL,
  id                text NOT NULL,
  url               text NOT NULL CHECK (length(url) <= 2048),
  token             text,
  auth_scheme       text CHECK (auth_scheme IN ('Bearer')),
  credential_id     bigint REFERENCES sealed_secrets (id) ON DELETE SET NULL,
  status            text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'auth_failed', 'stopped')),
  status_reason     text,
  created_at        timestamptz NOT NULL DEFAULT now(),
  status_changed_at timestamptz NOT NULL DEFAULT now(),
  deleted_at        timestamptz,
  CHECK ((auth_scheme IS NULL) = (credential_id IS NULL) OR deleted_at IS NOT NULL)
);
CREATE UNIQUE INDEX push_configs_live_id ON push_configs (tenant_id, task_id, id) WHERE deleted_at IS NULL;
CREATE INDEX push_configs_task ON push_configs (tenant_id, task_id, row_id) WHERE deleted_at IS NULL;
CREATE INDEX push_configs_tenant ON push_configs (tenant_id, row_id) WHERE deleted_at IS NULL;

-- Task events: the body is the StreamResponse exactly as received (text keeps bytes and key order).
CREATE TABLE task_events (
  id         bigserial PRIMARY KEY,
  tenant_id  text NOT NULL REFERENCES tenants (id),
  task_id    text NOT NULL,
  kind       text NOT NULL CHECK (kind IN ('task', 'message', 'statusUpdate', 'artifactUpdate')),
  body       text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE delivery_jobs (
  id              uuid PRIMARY KEY,
  seq             bigserial NOT NULL UNIQUE,
  tenant_id       text NOT NULL REFERENCES tenants (id),
  event_id        bigint NOT NULL REFERENCES task_events (id) ON DELETE CASCADE,
  config_row_id   bigint NOT NULL REFERENCES push_configs (row_id) ON DELETE CASCADE,
  task_id         text NOT NULL,
  config_id       text NOT NULL,
  status          text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'in_flight', 'waiting_retry',
                    'delivered', 'failed', 'exhausted', 'expired', 'cancelled', 'superseded', 'auth_failed', 'stopped')),
  reason          text,
  attempt_count   integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz,
  deadline        timestamptz NOT NULL,
  retry_of        uuid REFERENCES delivery_jobs (id) ON DELETE SET NULL,
  -- Set once its workflow has started; the lease keeps two dispatchers off the same job meanwhile.
  dispatched_at   timestamptz,
  dispatch_lease  timestamptz,
  created_at      timestamptz NOT NULL DEFAULT now(),
  finished_at     timestamptz,
  CHECK ((finished_at IS NULL) = (status IN ('queued', 'in_flight', 'waiting_retry')))
);
CREATE INDEX delivery_jobs_undispatched ON delivery_jobs (seq) WHERE dispatched_at IS NULL;
CREATE INDEX delivery_jobs_unfinished ON delivery_jobs (config_row_id, seq)
  WHERE status IN ('queued', 'in_flight', 'waiting_retry');
CREATE INDEX delivery_jobs_config ON delivery_jobs (config_row_id, seq);
CREATE INDEX delivery_jobs_finished ON delivery_jobs (finished_at) WHERE finished_at IS NOT NULL;

-- One row per attempt, written as started before the request and completed after it.
CREATE TABLE delivery_attempts (
  job_id         uuid NOT NULL REFERENCES delivery_jobs (id) ON DELETE CASCADE,
  n              integer NOT NULL CHECK (n >= 1),
  started_at     timestamptz NOT NULL,
  duration_ms    integer,
  outcome        text CHECK (outcome IN ('delivered', 'retry', 'auth_failed', 'stopped', 'failed', 'guard_refused', 'interrupted')),
  http_status    integer,
  error          text,
  retry_after_ms bigint,
  PRIMARY KEY (job_id, n)
);

-- Idempotency-Key: unique per tenant across routes, kept 24 h. The row is written in the same
-- transaction as the effect, so a concurrent repeat waits on the unique index for the first one.
CREATE TABLE idempotency_keys (
  tenant_id       text NOT NULL REFERENCES tenants (id),
  key             text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
  fingerprint     bytea NOT NULL,
  response_status integer NOT NULL,
  response_body   jsonb,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, key)
);

-- Append-only audit trail: who, what, when, status before and after. Never a secret.
CREATE TABLE audit_log (
  cursor      bigserial PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants (id),
  at          timestamptz NOT NULL DEFAULT now(),
  actor       text NOT NULL,
  action      text NOT NULL,
  object_type text NOT NULL,
  object_id   text NOT NULL,
  before      text,
  after       text
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, cursor);

CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_log is append-only';
END $$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
  FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
