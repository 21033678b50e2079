#!/usr/bin/env bash
# `npm run test:schemathesis`: schemathesis (from PyPI, in the interop tests' Python environment) fuzzes
# the management API of the whole service through its OpenAPI document (scripts/schemathesis.ts).
# Fuzzed configs and registrations carry made-up host names, so the step runs in a network namespace of
# its own with loopback only: nothing the service resolves or dials can leave the machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${A2A_PUSH_IN_NETNS:-}" != "1" ]; then
  # Needs PyPI: before entering the namespace.
  node scripts/install-python-sdk.js
  node scripts/install-temporal.js
  # Root (CI) makes the namespace directly; anyone else through a user namespace of their own.
  if [ "$(id -u)" -eq 0 ]; then UNSHARE=(unshare -n); else UNSHARE=(unshare -r -n); fi
  exec "${UNSHARE[@]}" env A2A_PUSH_IN_NETNS=1 bash "$0" "$@"
fi

ip link set lo up
echo "schemathesis: network namespace with loopback only:"
ip -brief addr
exec node_modules/.bin/ts-node --transpile-only scripts/schemathesis.ts "$@"
