# crosstalk: `make run` builds the static binary and shows the main job on
# this host (a bus-lock polluter, left alone and then handled by the agent);
# `make test` is what CI runs (.ci/run).

GO      ?= go
BIN     ?= ./crosstalk
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
FUZZTIME ?= 4s

.PHONY: build run doctor test vet fuzz clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/crosstalk

run: build
	$(BIN) lab run buslock --policy none,crosstalk

doctor: build
	$(BIN) doctor

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# One package at a time: the lab's tests run real loads and the libvirt test
# a software-emulated guest, and on a small host two packages at once starve
# each other's tenants (a 0.4 s lab phase whose victim never reported).
test: vet build
	$(GO) test -count=1 -p 1 ./...
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

fuzz:
	FUZZTIME=1m scripts/fuzz.sh

clean:
	rm -f $(BIN)

# --- install, release, deb ---------------------------------------------------
# `make install` puts the binary, the systemd unit, the default configuration
# (the documented example, which is the defaults), a modules-load.d entry for
# the msr driver, the docs, the man pages and the bash, zsh and fish
# completions (written by the binary just built) under DESTDIR/PREFIX, and
# creates the state directory. An existing /etc/crosstalk/crosstalk.yaml is
# kept (the new one goes beside it as crosstalk.yaml.dist).
PREFIX         ?= /usr
SYSCONFDIR     ?= /etc
LOCALSTATEDIR  ?= /var
SYSTEMDUNITDIR ?= /lib/systemd/system
DESTDIR        ?=
# The version of a release or package: the tag on HEAD (vX.Y.Z), else
# packaging/VERSION with the commit as a snapshot suffix.
RELEASE_VERSION ?= $(shell scripts/release-version.sh)
DIST           ?= dist

.PHONY: install release deb

install: build
	gen=$$(mktemp -d) && trap 'rm -rf "$$gen"' EXIT && \
	$(BIN) gen man "$$gen/man" && $(BIN) gen completions "$$gen/completions" && \
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" SYSCONFDIR="$(SYSCONFDIR)" LOCALSTATEDIR="$(LOCALSTATEDIR)" \
	SYSTEMDUNITDIR="$(SYSTEMDUNITDIR)" SRC_BIN="$(BIN)" SRC_UNIT=deploy/systemd/crosstalk.service \
	SRC_CONFIG=examples/crosstalk.yaml SRC_MODULES=packaging/modules-load.conf \
	SRC_DOCS="README.md CHANGELOG.md deploy/README.md" SRC_DOCS_DIR=docs \
	SRC_MAN_DIR="$$gen/man" SRC_COMPLETIONS_DIR="$$gen/completions" scripts/install.sh

# `make release`: dist/crosstalk-VERSION-linux-ARCH.tar.gz with the static
# binary, the unit, the default configuration, the Kubernetes manifests and
# Helm chart, the Prometheus rules and Grafana dashboards, the docs, the man
# pages and the shell completions.
release:
	scripts/release.sh tarball "$(RELEASE_VERSION)" "$(COMMIT)" "$(DIST)"

# `make deb`: dist/crosstalk_VERSION_ARCH.deb, built with dpkg-deb.
deb:
	scripts/release.sh deb "$(RELEASE_VERSION)" "$(COMMIT)" "$(DIST)"
# The libvirt end-to-end test alone (root): real TCG guests, libvirtd in a
# private namespace, the agent; `make test` runs it too (e2e/libvirt).
.PHONY: e2e-libvirt
e2e-libvirt: build
	CROSSTALK=$(abspath $(BIN)) e2e/libvirt/run.sh
