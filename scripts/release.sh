#!/usr/bin/env bash
# Builds a release artifact into DIST:
#   scripts/release.sh tarball VERSION COMMIT DIST  -> crosstalk-VERSION-linux-ARCH.tar.gz (+ .sha256)
#   scripts/release.sh deb     VERSION COMMIT DIST  -> crosstalk_VERSION_ARCH.deb (+ .sha256)
# Used by `make release` and `make deb`. The binary is static (CGO_ENABLED=0),
# built with -trimpath and the version and commit in `crosstalk version`;
# archives are reproducible (sorted, owned by root, mtimes of the commit).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 4 ] || { echo "usage: $0 tarball|deb VERSION COMMIT DIST" >&2; exit 2; }
kind=$1 version=$2 commit=$3 dist=$4
case $version in
  [0-9]*) ;;
  *) echo "release.sh: version $version must start with a digit" >&2; exit 2 ;;
esac
goarch=${GOARCH:-$(go env GOARCH)}
case $goarch in
  amd64 | arm64 | riscv64 | ppc64el | s390x) debarch=$goarch ;;
  ppc64le) debarch=ppc64el ;;
  386) debarch=i386 ;;
  arm) debarch=armhf ;;
  *) echo "release.sh: no Debian architecture for GOARCH=$goarch" >&2; exit 2 ;;
esac
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
work=$(mktemp -d "${TMPDIR:-/tmp}/crosstalk-release.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$dist"

bin=$work/crosstalk
CGO_ENABLED=0 GOOS=linux GOARCH=$goarch go build -trimpath \
  -ldflags "-s -w -X main.version=$version -X main.commit=$commit" -o "$bin" ./cmd/crosstalk

# The man pages and shell completions come from the command tree, written by
# a binary of the same source that runs here (the release one may be built
# for another architecture); the pages' date is SOURCE_DATE_EPOCH's.
genbin=$bin
if [ "$goarch" != "$(go env GOHOSTARCH)" ]; then
  genbin=$work/crosstalk-host
  CGO_ENABLED=0 GOOS=linux GOARCH=$(go env GOHOSTARCH) go build -trimpath \
    -ldflags "-X main.version=$version -X main.commit=$commit" -o "$genbin" ./cmd/crosstalk
fi
gen=$work/gen
"$genbin" gen man "$gen/man"
"$genbin" gen completions "$gen/completions"

# Everything an operator deploys with, beside the binary.
copy_assets() { # DIR
  mkdir -p "$1/kubernetes" "$1/helm" "$1/monitoring"
  cp deploy/kubernetes/*.yaml "$1/kubernetes/"
  cp -r deploy/helm/crosstalk "$1/helm/"
  cp -r monitoring/prometheus monitoring/grafana "$1/monitoring/"
  rm -f "$1"/monitoring/*/*_test.go
}

# Pins every file's metadata so that the same commit gives the same bytes.
normalize() { # DIR
  find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

sum() { (cd "$(dirname "$1")" && sha256sum "$(basename "$1")" > "$(basename "$1").sha256"); }

case $kind in
tarball)
  name=crosstalk-$version-linux-$goarch
  root=$work/$name
  mkdir -p "$root/systemd" "$root/modules-load.d"
  cp "$bin" "$root/crosstalk"
  cp examples/crosstalk.yaml "$root/crosstalk.yaml"
  cp deploy/systemd/crosstalk.service "$root/systemd/"
  cp packaging/modules-load.conf "$root/modules-load.d/crosstalk.conf"
  cp scripts/install.sh "$root/install.sh"
  cp packaging/Containerfile "$root/Containerfile"
  cp README.md CHANGELOG.md "$root/"
  mkdir -p "$root/docs" && cp docs/*.md "$root/docs/"
  cp -r "$gen/man" "$gen/completions" "$root/"
  cp deploy/README.md "$root/deploy-README.md"
  copy_assets "$root"
  chmod -R u=rwX,go=rX "$root"
  chmod 0755 "$root/crosstalk" "$root/install.sh"
  normalize "$root"
  out=$dist/$name.tar.gz
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -C "$work" -cf - "$name" | gzip -9n > "$out"
  ;;
deb)
  command -v dpkg-deb >/dev/null || { echo "release.sh: dpkg-deb is needed (apt-get install dpkg)" >&2; exit 1; }
  pkg=$work/pkg
  DESTDIR=$pkg PREFIX=/usr SYSCONFDIR=/etc LOCALSTATEDIR=/var SYSTEMDUNITDIR=/lib/systemd/system \
    STATE_DIR_MODE=none SRC_BIN=$bin SRC_UNIT=deploy/systemd/crosstalk.service \
    SRC_CONFIG=examples/crosstalk.yaml SRC_MODULES=packaging/modules-load.conf \
    SRC_DOCS="README.md CHANGELOG.md deploy/README.md" SRC_DOCS_DIR=docs \
    SRC_MAN_DIR="$gen/man" SRC_COMPLETIONS_DIR="$gen/completions" scripts/install.sh >/dev/null
  # Debian ships man pages compressed.
  gzip -9n "$pkg"/usr/share/man/man1/*.1
  copy_assets "$pkg/usr/share/crosstalk"
  chmod -R u=rwX,go=rX "$pkg"
  chmod 0755 "$pkg/usr/bin/crosstalk"
  mkdir -p "$pkg/DEBIAN"
  size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
  sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$debarch/" -e "s/@SIZE@/$size/" \
    packaging/debian/control > "$pkg/DEBIAN/control"
  cp packaging/debian/conffiles "$pkg/DEBIAN/"
  for s in postinst prerm postrm; do install -m 0755 "packaging/debian/$s" "$pkg/DEBIAN/$s"; done
  (cd "$pkg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$pkg/DEBIAN/md5sums"
  chmod 0644 "$pkg/DEBIAN/control" "$pkg/DEBIAN/conffiles" "$pkg/DEBIAN/md5sums"
  normalize "$pkg"
  out=$dist/crosstalk_${version}_$debarch.deb
  dpkg-deb --root-owner-group -Zxz --build "$pkg" "$out" >/dev/null
  ;;
*)
  echo "release.sh: unknown kind $kind (tarball or deb)" >&2
  exit 2
  ;;
esac
sum "$out"
echo "$out"
