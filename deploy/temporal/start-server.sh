#!/bin/sh
# The Temporal server of docker-compose.yml: the address the other roles and the clients dial is the
# container's own when it listens on every interface (as the official image's entrypoint does).
set -eu
if [ -z "${TEMPORAL_BROADCAST_ADDRESS:-}" ]; then
  TEMPORAL_BROADCAST_ADDRESS="$(getent hosts "$(hostname)" | awk '{ print $1; exit }')"
  export TEMPORAL_BROADCAST_ADDRESS
fi
exec temporal-server --config-file /etc/temporal/config.template.yaml --allow-no-auth start "$@"
