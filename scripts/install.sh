#!/bin/sh
# Installs crosstalk on a single host: the static binary, the systemd unit, the
# default configuration (kept if one exists), the msr modules-load.d entry,
# the docs, the man pages and shell completions (`crosstalk gen man|completions`
# writes them), and (unless STATE_DIR_MODE=none) the state directory.
#
# Used by `make install` (from the source tree), by the release tarball (run
# it from the unpacked directory: `sudo ./install.sh`) and by `make deb` to lay
# out the package. Honours DESTDIR, PREFIX (/usr), SYSCONFDIR (/etc),
# LOCALSTATEDIR (/var) and SYSTEMDUNITDIR (/lib/systemd/system). The source
# files default to the tarball's layout; `make install` points them at the tree.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr}
SYSCONFDIR=${SYSCONFDIR:-/etc}
LOCALSTATEDIR=${LOCALSTATEDIR:-/var}
SYSTEMDUNITDIR=${SYSTEMDUNITDIR:-/lib/systemd/system}
SRC_BIN=${SRC_BIN:-$here/crosstalk}
SRC_UNIT=${SRC_UNIT:-$here/systemd/crosstalk.service}
SRC_CONFIG=${SRC_CONFIG:-$here/crosstalk.yaml}
SRC_MODULES=${SRC_MODULES:-$here/modules-load.d/crosstalk.conf}
SRC_DOCS=${SRC_DOCS:-$here/README.md $here/CHANGELOG.md $here/deploy-README.md}
# The README links into docs/: the pages go beside it, under the same name.
SRC_DOCS_DIR=${SRC_DOCS_DIR:-$here/docs}
# What `crosstalk gen man DIR` and `crosstalk gen completions DIR` wrote.
SRC_MAN_DIR=${SRC_MAN_DIR:-$here/man}
SRC_COMPLETIONS_DIR=${SRC_COMPLETIONS_DIR:-$here/completions}
STATE_DIR_MODE=${STATE_DIR_MODE:-0700}

for f in "$SRC_BIN" "$SRC_UNIT" "$SRC_CONFIG" "$SRC_MODULES"; do
  [ -f "$f" ] || { echo "install.sh: missing $f" >&2; exit 1; }
done

install -d -m 0755 "$DESTDIR$PREFIX/bin" "$DESTDIR$SYSTEMDUNITDIR" "$DESTDIR$SYSCONFDIR/crosstalk" \
  "$DESTDIR$PREFIX/share/doc/crosstalk" "$DESTDIR$PREFIX/lib/modules-load.d"
install -m 0755 "$SRC_BIN" "$DESTDIR$PREFIX/bin/crosstalk"
# The unit names /usr/bin and /etc: follow PREFIX and SYSCONFDIR.
sed -e "s#/usr/bin/crosstalk#$PREFIX/bin/crosstalk#g" -e "s#/etc/crosstalk/#$SYSCONFDIR/crosstalk/#g" \
  "$SRC_UNIT" > "$DESTDIR$SYSTEMDUNITDIR/crosstalk.service"
chmod 0644 "$DESTDIR$SYSTEMDUNITDIR/crosstalk.service"
conf=$DESTDIR$SYSCONFDIR/crosstalk/crosstalk.yaml
if [ -e "$conf" ] && ! cmp -s "$SRC_CONFIG" "$conf"; then
  install -m 0644 "$SRC_CONFIG" "$conf.dist"
  echo "kept $conf (yours); the new default is $conf.dist"
else
  install -m 0644 "$SRC_CONFIG" "$conf"
fi
install -m 0644 "$SRC_MODULES" "$DESTDIR$PREFIX/lib/modules-load.d/crosstalk.conf"
for d in $SRC_DOCS; do
  [ -f "$d" ] || continue
  case $d in
    *deploy/README.md | *deploy-README.md) name=DEPLOY.md ;;
    *) name=$(basename "$d") ;;
  esac
  install -m 0644 "$d" "$DESTDIR$PREFIX/share/doc/crosstalk/$name"
done
if [ -d "$SRC_DOCS_DIR" ]; then
  install -d -m 0755 "$DESTDIR$PREFIX/share/doc/crosstalk/docs"
  for d in "$SRC_DOCS_DIR"/*.md; do
    [ -f "$d" ] && install -m 0644 "$d" "$DESTDIR$PREFIX/share/doc/crosstalk/docs/$(basename "$d")"
  done
fi
if [ -d "$SRC_MAN_DIR" ]; then
  install -d -m 0755 "$DESTDIR$PREFIX/share/man/man1"
  for m in "$SRC_MAN_DIR"/*.1; do
    [ -f "$m" ] && install -m 0644 "$m" "$DESTDIR$PREFIX/share/man/man1/$(basename "$m")"
  done
fi
if [ -d "$SRC_COMPLETIONS_DIR" ]; then
  # Each shell's vendor directory, under the name it looks the command up by.
  install -d -m 0755 "$DESTDIR$PREFIX/share/bash-completion/completions" \
    "$DESTDIR$PREFIX/share/zsh/vendor-completions" "$DESTDIR$PREFIX/share/fish/vendor_completions.d"
  install -m 0644 "$SRC_COMPLETIONS_DIR/crosstalk.bash" "$DESTDIR$PREFIX/share/bash-completion/completions/crosstalk"
  install -m 0644 "$SRC_COMPLETIONS_DIR/_crosstalk" "$DESTDIR$PREFIX/share/zsh/vendor-completions/_crosstalk"
  install -m 0644 "$SRC_COMPLETIONS_DIR/crosstalk.fish" "$DESTDIR$PREFIX/share/fish/vendor_completions.d/crosstalk.fish"
fi
if [ "$STATE_DIR_MODE" != none ]; then
  install -d -m "$STATE_DIR_MODE" "$DESTDIR$LOCALSTATEDIR/lib/crosstalk"
fi
if [ -z "$DESTDIR" ]; then
  echo "installed crosstalk in $PREFIX; start it with: systemctl daemon-reload && systemctl enable --now crosstalk"
fi
