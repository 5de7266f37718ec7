# cpsguard — build, test, benchmark.
#
# `make test` is THE test command: it installs what is missing (redis-server,
# SIPp), checks formatting and vet, runs every test with the race detector,
# then every fuzz target for a few seconds.
#
# bench/ is a module of its own (bench/go.mod): the root's ./... does not
# reach it, so lint and test run there too, and on the profiling build of
# the node (-tags cpsguardprof) that bench/profile.sh uses.

GO      ?= go
BIN     ?= bin/cpsguard
# A semantic version from git tags (scripts/version.sh, docs/releasing.md).
VERSION ?= $(shell ./scripts/version.sh 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all build test deps lint bench fuzz run clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/cpsguard

deps:
	./scripts/install-deps.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags cpsguardprof ./cmd/cpsguard
	cd bench && $(GO) vet ./...

test: deps lint
	$(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -count=1 -tags cpsguardprof -run Pprof ./cmd/cpsguard
	cd bench && $(GO) test -race -count=1 ./...
	./scripts/fuzz.sh

# Every fuzz target for FUZZTIME each (default 20000x executions; a
# duration works too, e.g. make fuzz FUZZTIME=1m; see scripts/fuzz.sh).
fuzz:
	FUZZTIME=$(or $(FUZZTIME),20000x) ./scripts/fuzz.sh

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./...

run:
	$(GO) run ./cmd/cpsguard serve --config testdata/cpsguard.yaml

clean:
	rm -rf bin
