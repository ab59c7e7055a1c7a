#!/usr/bin/env bash
# The local stack behind `make run`: Postgres (started from the system binaries when
# DATABASE_URL is not set), one database per service, migrations, the three services and the
# gateway in the foreground, then the demo (gateway/cmd/demo: its target database is made here,
# its data over the APIs; idempotent, so a second run changes nothing; MILLWRIGHT_DEMO=0 skips
# it). Ctrl-C or SIGTERM stops every process it started, Postgres included.
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

# No secret goes on a command line: every local user reads them (ps, /proc/<pid>/cmdline).
# The services get their database URL in DATABASE_URL (they refuse one with a password as a
# flag), and psql gets the URL without its password and the password in PGPASSWORD.
# url_password URL: the password of a postgres:// URL, percent-decoded ("" if none).
url_password() {
  local rest=${1#*://} ui
  [[ $1 == *://* && $rest == *@* ]] || return 0
  ui=${rest%%@*}
  [[ $ui == *:* ]] || return 0
  ui=${ui#*:}
  printf '%b' "${ui//%/\\x}"
}
# pg URL ARGS...: psql on URL, its password in the environment.
pg() {
  local url=$1 pw
  shift
  pw=$(url_password "$url")
  if [ -n "$pw" ]; then
    PGPASSWORD=$pw psql "$(printf '%s' "$url" | sed -E 's#^([a-z]+://[^:/@]*):[^@]*@#\1@#')" "$@"
  else
    psql "$url" "$@"
  fi
}

export MILLWRIGHT_ADMIN_TOKEN MILLWRIGHT_SERVICE_TOKEN MILLWRIGHT_ENCRYPTION_KEY MILLWRIGHT_AUDIT_KEY
export MILLWRIGHT_INSTANCE_ID=${MILLWRIGHT_INSTANCE_ID:-local}
MILLWRIGHT_ADMIN_TOKEN=$(secret admin-token MILLWRIGHT_ADMIN_TOKEN)
MILLWRIGHT_SERVICE_TOKEN=$(secret service-token MILLWRIGHT_SERVICE_TOKEN)
if [ -z "${MILLWRIGHT_ENCRYPTION_KEY:-}" ]; then
  [ -s "$RUN/encryption-key" ] || (umask 077 && printf 'k1:%s' "$(head -c 32 /dev/urandom | base64 | tr -d '\n')" > "$RUN/encryption-key")
  MILLWRIGHT_ENCRYPTION_KEY=$(cat "$RUN/encryption-key")
fi
# The audit trail's HMAC key (docs/audit.md): secrets appear in the trail only as keyed hashes.
if [ -z "${MILLWRIGHT_AUDIT_KEY:-}" ]; then
  [ -s "$RUN/audit-key" ] || (umask 077 && head -c 32 /dev/urandom | base64 | tr -d '\n' > "$RUN/audit-key")
  MILLWRIGHT_AUDIT_KEY=$(cat "$RUN/audit-key")
fi

for svc in policy roleset billing; do
  db=millwright_$svc
  exists=$(pg "$DATABASE_URL" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$db'")
  [ "$exists" = 1 ] || pg "$DATABASE_URL" -qc "CREATE DATABASE $db" >/dev/null
  DATABASE_URL=$(dburl "$db") "$BIN/$svc" migrate
done
# policy's database for psql (README, "The audit trail"): the URL without its password, which
# goes in PGPASSWORD, so that `set -a; . .run/policy-db.env; psql "$PGURL"` puts no secret on
# a command line.
u=$(dburl millwright_policy)
(umask 077 && printf 'PGURL=%q\nPGPASSWORD=%q\n' "$(printf '%s' "$u" | sed -E 's#^([a-z]+://[^:/@]*):[^@]*@#\1@#')" \
  "$(url_password "$u")" > "$RUN/policy-db.env")

# The demo's target database (its data table): owned by a non-superuser cluster admin for
# roleset (CREATEROLE + pg_signal_backend, password generated into .run/demo-admin-password),
# one table under row-level security whose policies name the demo's roles. MILLWRIGHT_DEMO=0
# skips the demo.
DEMO=${MILLWRIGHT_DEMO:-1}
DEMO_DB=millwright_demo
DEMO_ADMIN=millwright_demo_admin
rm -f "$RUN/demo-loaded"
if [ "$DEMO" = 1 ]; then
  demo_pw=$(secret demo-admin-password MILLWRIGHT_DEMO_ADMIN_PASSWORD)
  # The password reaches psql in its environment (\getenv), not as a -v argument.
  MILLWRIGHT_DEMO_PW=$demo_pw pg "$DATABASE_URL" -qX -v ON_ERROR_STOP=1 -v admin="$DEMO_ADMIN" -v db="$DEMO_DB" >/dev/null <<'SQL'
\getenv pw MILLWRIGHT_DEMO_PW
SET client_min_messages = warning;
SELECT format('CREATE ROLE %I LOGIN CREATEROLE', :'admin')
  WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'admin') \gexec
SELECT format('ALTER ROLE %I LOGIN CREATEROLE NOSUPERUSER PASSWORD %L', :'admin', :'pw') \gexec
SELECT format('GRANT pg_signal_backend TO %I', :'admin') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'admin')
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \gexec
SQL
  # As the admin: it owns the table, so the admin connection bypasses RLS and viewers do not.
  pg "$(dburl "$DEMO_DB")" -qX -v ON_ERROR_STOP=1 -v admin="$DEMO_ADMIN" >/dev/null <<'SQL'
SET client_min_messages = warning;
BEGIN;
SET LOCAL ROLE :"admin";
CREATE TABLE IF NOT EXISTS orders (region text NOT NULL, item text NOT NULL, amount numeric NOT NULL);
INSERT INTO orders (region, item, amount)
  SELECT * FROM (VALUES ('emea', 'bolts', 120), ('emea', 'nuts', 80), ('apac', 'gears', 200),
                        ('apac', 'springs', 45), ('amer', 'washers', 60)) v
  WHERE NOT EXISTS (SELECT FROM orders);
ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
-- docs/datatable-policies.md: membership, wrapped in a sub-select so it runs once per query.
DROP POLICY IF EXISTS emea ON orders;
CREATE POLICY emea ON orders FOR SELECT
  USING (region = 'emea' AND (SELECT pg_has_role(current_user, 'sales_emea', 'member')));
DROP POLICY IF EXISTS apac ON orders;
CREATE POLICY apac ON orders FOR SELECT
  USING (region = 'apac' AND (SELECT pg_has_role(current_user, 'sales_apac', 'member')));
DROP POLICY IF EXISTS all_regions ON orders;
CREATE POLICY all_regions ON orders FOR SELECT
  USING ((SELECT pg_has_role(current_user, 'sales_all', 'member')));
COMMIT;
SQL
fi

# demo_url: the demo database as its cluster admin, for roleset's cluster registration.
demo_url() {
  local base=${DATABASE_URL%%\?*} rest host
  rest=${base#*://}
  host=${rest##*@}
  host=${host%%/*}
  printf 'postgres://%s:%s@%s/%s' "$DEMO_ADMIN" "$demo_pw" "$host" "$DEMO_DB"
}

POLICY_ADDR=${MILLWRIGHT_POLICY_ADDR:-127.0.0.1:50051}
ROLESET_ADDR=${MILLWRIGHT_ROLESET_ADDR:-127.0.0.1:50052}
BILLING_ADDR=${MILLWRIGHT_BILLING_ADDR:-127.0.0.1:50053}
HTTP_ADDR=${MILLWRIGHT_HTTP_ADDR:-127.0.0.1:8080}
METRICS_PORT=${MILLWRIGHT_METRICS_BASE_PORT:-9091} # policy, roleset, billing: this port and the next two
PROXY_ADDR=${MILLWRIGHT_PROXY_ADDR:-127.0.0.1:55433} # roleset's PostgreSQL proxy (data tables in proxy mode)
# The proxy offers TLS with a local self-signed certificate, made once (roleset devcert).
[ -s "$RUN/proxy-tls/cert.pem" ] || "$BIN/roleset" devcert --dir "$RUN/proxy-tls"
export MILLWRIGHT_POLICY_ADDR=$POLICY_ADDR MILLWRIGHT_ROLESET_ADDR=$ROLESET_ADDR MILLWRIGHT_BILLING_ADDR=$BILLING_ADDR

DATABASE_URL=$(dburl millwright_policy) \
  "$BIN/policy" serve --grpc-addr "$POLICY_ADDR" --metrics-addr 127.0.0.1:$((METRICS_PORT + 0)) &
pids+=($!)
DATABASE_URL=$(dburl millwright_roleset) \
  "$BIN/roleset" serve --grpc-addr "$ROLESET_ADDR" --metrics-addr 127.0.0.1:$((METRICS_PORT + 1)) \
  --proxy-addr "$PROXY_ADDR" --proxy-tls-cert "$RUN/proxy-tls/cert.pem" --proxy-tls-key "$RUN/proxy-tls/key.pem" &
pids+=($!)
DATABASE_URL=$(dburl millwright_billing) \
  "$BIN/billing" serve --grpc-addr "$BILLING_ADDR" --metrics-addr 127.0.0.1:$((METRICS_PORT + 2)) &
pids+=($!)
"$BIN/gateway" serve --http-addr "$HTTP_ADDR" &
pids+=($!)

cat >&2 <<MSG
millwright: running
  policy   grpc $POLICY_ADDR   metrics http://127.0.0.1:$((METRICS_PORT + 0))/metrics
  roleset  grpc $ROLESET_ADDR   metrics http://127.0.0.1:$((METRICS_PORT + 1))/metrics   proxy $PROXY_ADDR (TLS: .run/proxy-tls)
  billing  grpc $BILLING_ADDR   metrics http://127.0.0.1:$((METRICS_PORT + 2))/metrics
  gateway  http://$HTTP_ADDR   (/openapi.json, /healthz)
  admin token in .run/admin-token; Ctrl-C stops everything
MSG

if [ "$DEMO" = 1 ]; then
  # Loads the demo over the services' APIs once they (and the gateway) are healthy; idempotent.
  # In the background and waited for, so that Ctrl-C or SIGTERM stops the stack at once.
  log "loading the demo"
  MILLWRIGHT_RUN_DIR=$RUN MILLWRIGHT_DEMO_TARGET_URL=$(demo_url) MILLWRIGHT_HTTP_ADDR=$HTTP_ADDR \
    "$BIN/demo" load &
  pids+=($!)
  demo_ok=1
  wait "$!" || demo_ok=0
  unset 'pids[-1]'
  if [ "$demo_ok" != 1 ]; then
    log "the demo did not load; stopping"
    exit 1
  fi
  # The roles exist now (roleset made them): let them read the table; RLS picks the rows.
  pg "$(dburl "$DEMO_DB")" -qX -v ON_ERROR_STOP=1 -v admin="$DEMO_ADMIN" >/dev/null <<'SQL'
SET client_min_messages = warning;
BEGIN;
SET LOCAL ROLE :"admin";
GRANT SELECT ON orders TO sales_emea, sales_apac, sales_all;
COMMIT;
SQL
  touch "$RUN/demo-loaded"
  log "demo loaded"
fi

# Any process ending ends the stack: a half-running stack is worse than a stopped one.
wait -n "${pids[@]}" || true
log "a process exited; stopping the rest"
