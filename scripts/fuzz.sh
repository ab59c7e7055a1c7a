#!/usr/bin/env bash
# Runs every Fuzz* target of the repository for a while each (default 30s): the parsers of
# untrusted input (data-table references, tenants, role names, flow and app values, stream
# events). `go test` alone only replays their seed corpora.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-30s}
grep -rl --include='*_test.go' '^func Fuzz' pkg services gateway cli | sort | while read -r f; do
  dir=./$(dirname "$f")
  for name in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
    echo "== $dir $name ($T)"
    go test -run='^$' -fuzz="^${name}\$" -fuzztime="$T" "$dir"
  done
done
