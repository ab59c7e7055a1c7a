#!/usr/bin/env bash
# The local stack behind `make run`: Postgres (started from the system binaries when
# DATABASE_URL is not set), one database per service, migrations, the three services and the
# gateway in the foreground. Ctrl-C or SIGTERM stops every process it started, Postgres included.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MILLWRIGHT_BIN_DIR:-$ROOT/bin}
RUN=${MILLWRIGHT_RUN_DIR:-$ROOT/.run}
mkdir -p "$RUN"
chmod 755 "$RUN"

log() { printf 'millwright: %s\n' "$*" >&2; }

# secret NAME ENV: the value of ENV, else the one kept in .run/NAME, else a new random one.
secret() {
  local file=$RUN/$1 val=${!2:-}
  if [ -z "$val" ]; then
    [ -s "$file" ] || (umask 077 && head -c 32 /dev/urandom | base64 | tr -d '=+/\n' > "$file")
    val=$(cat "$file")
  else
    (umask 077 && printf '%s' "$val" > "$file")
  fi
  printf '%s' "$val"
}

started_pg=0
pids=()
cleanup() {
  trap - INT TERM EXIT
  if [ ${#pids[@]} -gt 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  if [ "$started_pg" = 1 ]; then "$ROOT/scripts/localpg.sh" stop || true; fi
  log "stopped"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "${DATABASE_URL:-}" ]; then
  "$ROOT/scripts/localpg.sh" start
  started_pg=1
  DATABASE_URL=$("$ROOT/scripts/localpg.sh" url)
fi

# dburl NAME: DATABASE_URL with its database replaced by NAME.
dburl() {
  local base=${DATABASE_URL%%\?*} query=""
  [ "$base" != "$DATABASE_URL" ] && query="?${DATABASE_URL#*\?}"
  printf '%s/%s%s' "${base%/*}" "$1" "$query"
}

export MILLWRIGHT_ADMIN_TOKEN MILLWRIGHT_SERVICE_TOKEN MILLWRIGHT_ENCRYPTION_KEY MILLWRIGHT_SET_SECRET
export MILLWRIGHT_INSTANCE_ID=${MILLWRIGHT_INSTANCE_ID:-local}
MILLWRIGHT_ADMIN_TOKEN=$(secret admin-token MILLWRIGHT_ADMIN_TOKEN)
MILLWRIGHT_SERVICE_TOKEN=$(secret service-token MILLWRIGHT_SERVICE_TOKEN)
if [ -z "${MILLWRIGHT_ENCRYPTION_KEY:-}" ]; then
  [ -s "$RUN/encryption-key" ] || (umask 077 && printf 'k1:%s' "$(head -c 32 /dev/urandom | base64 | tr -d '\n')" > "$RUN/encryption-key")
  MILLWRIGHT_ENCRYPTION_KEY=$(cat "$RUN/encryption-key")
fi
MILLWRIGHT_SET_SECRET=$(secret set-secret MILLWRIGHT_SET_SECRET)

for svc in policy roleset billing; do
  db=millwright_$svc
  exists=$(psql "$DATABASE_URL" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$db'")
  [ "$exists" = 1 ] || psql "$DATABASE_URL" -qc "CREATE DATABASE $db" >/dev/null
  "$BIN/$svc" migrate --database-url "$(dburl "$db")"
done

POLICY_ADDR=${MILLWRIGHT_POLICY_ADDR:-127.0.0.1:50051}
ROLESET_ADDR=${MILLWRIGHT_ROLESET_ADDR:-127.0.0.1:50052}
BILLING_ADDR=${MILLWRIGHT_BILLING_ADDR:-127.0.0.1:50053}
HTTP_ADDR=${MILLWRIGHT_HTTP_ADDR:-127.0.0.1:8080}
METRICS_PORT=${MILLWRIGHT_METRICS_BASE_PORT:-9091} # policy, roleset, billing: this port and the next two
export MILLWRIGHT_POLICY_ADDR=$POLICY_ADDR MILLWRIGHT_ROLESET_ADDR=$ROLESET_ADDR MILLWRIGHT_BILLING_ADDR=$BILLING_ADDR

"$BIN/policy" serve --grpc-addr "$POLICY_ADDR" --metrics-addr 127.0.0.1:$((METRICS_PORT + 0)) \
  --database-url "$(dburl millwright_policy)" &
pids+=($!)
"$BIN/roleset" serve --grpc-addr "$ROLESET_ADDR" --metrics-addr 127.0.0.1:$((METRICS_PORT + 1)) \
  --database-url "$(dburl millwright_roleset)" &
pids+=($!)
"$BIN/billing" serve --grpc-addr "$BILLING_ADDR" --metrics-addr 127.0.0.1:$((METRICS_PORT + 2)) \
  --database-url "$(dburl millwright_billing)" &
pids+=($!)
"$BIN/gateway" serve --http-addr "$HTTP_ADDR" &
pids+=($!)

cat >&2 <<MSG
millwright: running
  policy   grpc $POLICY_ADDR   metrics http://127.0.0.1:$((METRICS_PORT + 0))/metrics
  roleset  grpc $ROLESET_ADDR   metrics http://127.0.0.1:$((METRICS_PORT + 1))/metrics
  billing  grpc $BILLING_ADDR   metrics http://127.0.0.1:$((METRICS_PORT + 2))/metrics
  gateway  http://$HTTP_ADDR   (/openapi.json, /healthz)
  admin token in .run/admin-token; Ctrl-C stops everything
MSG

# Any process ending ends the stack: a half-running stack is worse than a stopped one.
wait -n "${pids[@]}" || true
log "a process exited; stopping the rest"
