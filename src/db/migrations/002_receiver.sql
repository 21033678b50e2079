-- Registrations: remote tasks nr-llm waits on. The callback credential is stored as SHA-256 only.
CREATE TABLE registrations (
  id                  uuid PRIMARY KEY,
  tenant_id           text NOT NULL REFERENCES tenants (id),
  mode                text NOT NULL CHECK (mode IN ('embedded', 'separate')),
  status              text NOT NULL CHECK (status IN ('pending', 'active', 'resolved', 'failed', 'deleted')),
  agent_url           text NOT NULL CHECK (length(agent_url) <= 2048),
  agent_token_id      bigint REFERENCES sealed_secrets (id) ON DELETE SET NULL,
  remote_task_id      text,
  remote_state        text,
  push_enabled        boolean NOT NULL,
  reason              text,
  callback_hash       bytea CHECK (length(callback_hash) = 32),
  remote_config_made  boolean NOT NULL DEFAULT false,
  workflow_started    boolean NOT NULL DEFAULT false,
  callbacks_received  bigint NOT NULL DEFAULT 0,
  callbacks_late      bigint NOT NULL DEFAULT 0,
  created_at          timestamptz NOT NULL DEFAULT now(),
  resolved_at         timestamptz,
  CHECK (mode = 'embedded' OR remote_task_id IS NOT NULL)
);
CREATE INDEX registrations_tenant ON registrations (tenant_id, created_at);

-- Callbacks stored before the 2xx; unprocessed ones count against the inbox bounds.
CREATE TABLE inbox_callbacks (
  id              bigserial PRIMARY KEY,
  registration_id uuid NOT NULL REFERENCES registrations (id) ON DELETE CASCADE,
  received_at     timestamptz NOT NULL DEFAULT now(),
  body_task_id    text,
  kind            text NOT NULL,
  body            text NOT NULL,
  processed_at    timestamptz
);
CREATE INDEX inbox_callbacks_unprocessed ON inbox_callbacks (registration_id, id) WHERE processed_at IS NULL;
CREATE INDEX inbox_callbacks_processed ON inbox_callbacks (processed_at) WHERE processed_at IS NOT NULL;

-- The resolutions feed. Writers take a per-tenant transaction lock, so cursors follow commit order.
CREATE TABLE feed_items (
  cursor          bigserial PRIMARY KEY,
  tenant_id       text NOT NULL REFERENCES tenants (id),
  registration_id uuid NOT NULL REFERENCES registrations (id) ON DELETE CASCADE,
  remote_task_id  text,
  kind            text NOT NULL CHECK (kind IN ('state', 'failed')),
  state           text,
  reason          text,
  terminal        boolean NOT NULL,
  observed_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX feed_items_tenant ON feed_items (tenant_id, cursor);
-- A terminal item appears exactly once per registration.
CREATE UNIQUE INDEX feed_items_one_terminal ON feed_items (registration_id) WHERE terminal;
