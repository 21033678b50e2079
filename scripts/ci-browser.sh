#!/usr/bin/env bash
# CI step: the browser check of the Temporal Web UI (test/browser, not part of `npm test`).
# Installs Debian's chromium when /usr/bin/chromium is missing (playwright cannot download its own
# browser here), then runs the check; screenshots land in test-output/webui/.
set -euo pipefail
cd "$(dirname "$0")/.."

CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  echo "ci-browser: using $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
else
  echo "ci-browser: $CHROMIUM missing; installing chromium with apt-get"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
  if [ ! -x "$CHROMIUM" ]; then
    echo "ci-browser: apt-get finished but $CHROMIUM is still missing" >&2
    exit 1
  fi
  echo "ci-browser: installed $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
fi

if [ "${WEBUI_TEMPORAL:-}" = "cluster" ]; then
  # The check on a real Temporal server: its server, sql tool and ui-server built when missing.
  npx ts-node --transpile-only scripts/cluster.ts --build-only
fi
echo "ci-browser: running the Web UI browser check (jest -c jest.browser.config.js)"
npx jest -c jest.browser.config.js
echo "ci-browser: passed; screenshots in test-output/webui${WEBUI_TEMPORAL:+-$WEBUI_TEMPORAL}/"
