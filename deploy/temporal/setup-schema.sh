#!/bin/sh
# Creates (when missing) and migrates Temporal's two databases on Postgres with Temporal's own sql
# tool. One script for `npm run cluster` (scripts/cluster) and docker-compose.yml (temporal-schema).
#   SQL_TOOL      the sql tool (go.temporal.io/server/cmd/tools/sql), default temporal-sql-tool
#   SCHEMA_DIR    the module's schema/postgresql/v12 folder
#   POSTGRES_SEEDS, DB_PORT, POSTGRES_USER, POSTGRES_PWD, DBNAME, VISIBILITY_DBNAME
# A database that already exists is only brought up to date (update-schema applies what is missing).
set -eu
tool="${SQL_TOOL:-temporal-sql-tool}"
: "${SCHEMA_DIR:?set SCHEMA_DIR to schema/postgresql/v12 of go.temporal.io/server}"
: "${POSTGRES_USER:?}"
: "${POSTGRES_PWD:?}"
run() {
  "$tool" --plugin postgres12 --ep "${POSTGRES_SEEDS:-127.0.0.1}" -p "${DB_PORT:-5432}" \
    -u "$POSTGRES_USER" --pw "$POSTGRES_PWD" "$@"
}
setup() { # database, versioned folder
  # `create` of an existing database and `setup-schema -v 0.0` of a migrated one change nothing
  # (checked with the v1.32.2 tool): every step is safe to repeat.
  run --db "$1" create >/dev/null 2>&1 || true
  run --db "$1" setup-schema -v 0.0
  run --db "$1" update-schema -d "$SCHEMA_DIR/$2/versioned"
  echo "temporal schema: $1 is up to date"
}
setup "${DBNAME:-temporal}" temporal
setup "${VISIBILITY_DBNAME:-temporal_visibility}" visibility
