#!/bin/sh
# Prints the version of a release or package built from this checkout: the
# tag on HEAD without its "v" (v0.1.0 -> 0.1.0), else packaging/VERSION as a
# snapshot, ~gitDATE.COMMIT (Debian sorts it before the release itself), with
# +dirty when the tree has uncommitted changes.
set -eu
cd "$(dirname "$0")/.."
if tag=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null); then
  echo "${tag#v}"
  exit 0
fi
base=$(cat packaging/VERSION)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
date=$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || date -u +%Y%m%d)
dirty=
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then dirty=+dirty; fi
echo "$base~git$date.$commit$dirty"
