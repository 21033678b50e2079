#!/usr/bin/env bash
# CI step `npm run test:clients`: the PHP client nr-llm would generate from /v1/openapi.json, and the
# document's validators (scripts/clients.ts). Installs what is missing first: PHP 8.2 with curl,
# mbstring, xml and Guzzle from Debian (apt-get, as root or through sudo), Java for the generator, and
# openapi-generator-cli and openapi-spec-validator from PyPI into .tools/a2a-py
# (test/clients/requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(php-cli php-curl php-mbstring php-xml php-guzzlehttp-guzzle)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "ci-clients: installing ${missing[*]} with apt-get"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi
echo "ci-clients: $(php -r 'echo "PHP ", PHP_VERSION;') ($(php -r 'echo implode(", ", array_filter(["curl", "mbstring", "xml", "json"], "extension_loaded"));')), $(java -version 2>&1 | head -1)"

node scripts/install-python-sdk.js clients
node scripts/install-temporal.js
exec node_modules/.bin/ts-node --transpile-only scripts/clients.ts "$@"
