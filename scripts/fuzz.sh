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
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/fuzz.$$.log 2>&1; then
      # The fuzzing engine itself sometimes ends a run at its deadline with
      # "context deadline exceeded" and no failing input (a worker slow to
      # stop on a loaded machine): run that target once more. A real
      # failure writes its input under testdata/fuzz and fails again.
      if grep -q 'context deadline exceeded' /tmp/fuzz.$$.log && ! grep -q 'Failing input written' /tmp/fuzz.$$.log; then
        echo "fuzz $pkg $target: the engine stopped at its deadline with no failing input; once more"
        go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/fuzz.$$.log 2>&1 || { cat /tmp/fuzz.$$.log; exit 1; }
      else
        cat /tmp/fuzz.$$.log
        exit 1
      fi
    fi
    n=$((n+1))
  done
done
rm -f /tmp/fuzz.$$.log
echo "fuzzed $n targets"
[ "$n" -gt 0 ]
