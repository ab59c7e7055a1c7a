#!/usr/bin/env bash
# localpg.sh: the PostgreSQL `make run` uses when DATABASE_URL is not set.
#
#   scripts/localpg.sh start|stop [fast|immediate]|status|url
#
# stop's mode is pg_ctl's shutdown mode: fast (the default: sessions ended, a checkpoint) or
# immediate (no checkpoint: crash recovery on the next start), which the Postgres restart test
# uses (docs/reliability.md).
# Data lives in $ROOT/.run/pg (gitignored) and is reused across runs; initdb only runs when it
# is missing. The superuser password is generated once into .run/pg-password (mode 600) and
# every login needs it (scram-sha-256), so the dev server behaves like a real one. Listens on
# 127.0.0.1:${MILLWRIGHT_PG_PORT:-55432} only. As root the server runs as the `postgres` user,
# because PostgreSQL refuses to run as root.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN=${MILLWRIGHT_RUN_DIR:-$ROOT/.run}
DATA=$RUN/pg
SOCK=$RUN/pg-sock
LOG=$RUN/pg.log
PWFILE=$RUN/pg-password
PORT=${MILLWRIGHT_PG_PORT:-55432}

die() { echo "localpg: $*" >&2; exit 1; }

# Newest installed server (Debian layout), compared as versions so 10 beats 9.6; the PATH is
# only a fallback for machines without that layout.
find_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [[ -n $d && -x $d/pg_ctl ]]; then echo "$d"; return; fi
  d=$(command -v pg_ctl 2>/dev/null || true)
  [[ -n $d ]] || die "no PostgreSQL found in /usr/lib/postgresql/*/bin (apt-get install postgresql)"
  dirname "$d"
}
BIN=$(find_bin)

if [[ $(id -u) == 0 ]]; then
  id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' user to run the server"
  as_pg() { (cd "$RUN" && runuser -u postgres -- "$@"); }
  give_pg() { chown postgres:postgres "$@"; }
else
  as_pg() { (cd "$RUN" && "$@"); }
  give_pg() { :; }
fi

pg_ctl() { as_pg "$BIN/pg_ctl" -D "$DATA" "$@"; }

running() { [[ -f $DATA/PG_VERSION ]] && pg_ctl status >/dev/null 2>&1; }

# Port of the running server (line 4 of postmaster.pid), else the configured one.
port() {
  local p=""
  if running; then p=$(sed -n 4p "$DATA/postmaster.pid" 2>/dev/null || true); fi
  echo "${p:-$PORT}"
}

log_tail() {
  if [[ -s $LOG ]]; then echo "--- $LOG (tail) ---" >&2; tail -n 20 "$LOG" >&2; fi
}

init() {
  [[ -s $PWFILE ]] || (umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$PWFILE")
  chmod 600 "$PWFILE"
  # initdb reads the password as `postgres`, who cannot read our copy: hand it a temporary one.
  # The data dir is created here (not by initdb) because `postgres` may not write in .run.
  mkdir -p "$DATA" && chmod 700 "$DATA" && give_pg "$DATA"
  local tmp=$RUN/.pg-pwfile.$$
  (umask 077 && cp "$PWFILE" "$tmp") && give_pg "$tmp"
  if ! as_pg "$BIN/initdb" -D "$DATA" -U postgres --pwfile="$tmp" --auth=scram-sha-256 \
      -E UTF8 --locale=C >"$RUN/initdb.log" 2>&1; then
    rm -f "$tmp"; cat "$RUN/initdb.log" >&2; die "initdb failed"
  fi
  rm -f "$tmp" "$RUN/initdb.log"
  cat >"$DATA/pg_hba.conf" <<'EOF'
# Written by scripts/localpg.sh: a password for every connection.
local all all scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
host  all all ::1/128 scram-sha-256
EOF
  echo "include = 'localpg.conf'" >>"$DATA/postgresql.conf"
}

start() {
  mkdir -p "$RUN"
  # `postgres` must be able to enter .run (not list it) to reach its data dir.
  chmod o+x "$RUN"
  if [[ $(id -u) == 0 ]] && ! runuser -u postgres -- test -x "$RUN"; then
    die "user postgres cannot reach $RUN: make its parent directories traversable (chmod o+x)"
  fi
  running && return 0
  if [[ ! -f $DATA/PG_VERSION ]]; then
    if [[ -n $(ls -A "$DATA" 2>/dev/null) ]]; then die "$DATA is not empty but holds no cluster: remove it"; fi
    init
  fi
  [[ -s $PWFILE ]] || die "$PWFILE is missing: the password of $DATA is lost (rm -rf $DATA to start over)"
  mkdir -p "$SOCK" && chmod 700 "$SOCK" && touch "$LOG" && give_pg "$SOCK" "$LOG"
  # The socket path is limited to ~107 bytes; with a deep checkout, go TCP-only.
  local sockdir=$SOCK
  (( ${#SOCK} + 20 < 107 )) || sockdir=""
  # Rewritten on every start so that MILLWRIGHT_PG_PORT changes take effect.
  # max_connections: the end-to-end tests run three replicas of every service on this server,
  # and policy's pools alone are 24 + 8 connections a replica (plus its listener): the default
  # 100 is exhausted under load (docs/reliability.md, "Load with no fault").
  cat >"$DATA/localpg.conf" <<EOF
# Written by scripts/localpg.sh on every start.
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sockdir'
password_encryption = 'scram-sha-256'
max_connections = 300
EOF
  give_pg "$DATA/localpg.conf"
  local out
  if ! out=$(pg_ctl -s -w -t 60 -l "$LOG" start 2>&1); then
    echo "$out" >&2; log_tail; die "server did not start (port $PORT in use? set MILLWRIGHT_PG_PORT)"
  fi
}

stop() {
  local mode=${1:-fast}
  [[ $mode == fast || $mode == immediate ]] || die "stop mode must be fast or immediate, not $mode"
  running || return 0
  local out
  out=$(pg_ctl -s -w -t 60 -m "$mode" stop 2>&1) || { echo "$out" >&2; log_tail; die "server did not stop"; }
}

case ${1:-} in
  start) start ;;
  stop) stop "${2:-fast}" ;;
  status)
    if running; then echo "running on 127.0.0.1:$(port) (data $DATA)"; else echo "stopped"; exit 3; fi ;;
  url)
    [[ -s $PWFILE ]] || die "no password yet: run '$0 start' first"
    echo "postgres://postgres:$(cat "$PWFILE")@127.0.0.1:$(port)/postgres?sslmode=disable" ;;
  *) echo "usage: $0 start|stop [fast|immediate]|status|url" >&2; exit 2 ;;
esac
