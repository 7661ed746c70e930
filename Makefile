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

test: vet build
	$(GO) test -count=1 ./...
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

fuzz:
	FUZZTIME=1m scripts/fuzz.sh

clean:
	rm -f $(BIN)

# The libvirt end-to-end test alone (root): real TCG guests, libvirtd in a
# private namespace, the agent; `make test` runs it too (e2e/libvirt).
.PHONY: e2e-libvirt
e2e-libvirt: build
	CROSSTALK=$(abspath $(BIN)) e2e/libvirt/run.sh
