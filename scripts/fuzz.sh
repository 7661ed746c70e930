#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME each (default 4s), so
# CI exercises the parsers of sysfs/procfs/resctrl text with random input.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-4s}
n=0
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "fuzz $pkg $target ($FUZZTIME)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/fuzz.$$.log 2>&1 || { cat /tmp/fuzz.$$.log; exit 1; }
    n=$((n+1))
  done
done
rm -f /tmp/fuzz.$$.log
echo "fuzzed $n targets"
[ "$n" -gt 0 ]
