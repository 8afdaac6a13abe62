# The two commands a newcomer needs: `make demo` and `make test`.
GO ?= go

# The workspace's two modules (go.work): the library (.) and the command
# (./cmd, its own go.mod; see docs/modules.md). `./...` alone stops at
# cmd/go.mod, so vet and test name both.
PKGS = ./... ./cmd/...

.PHONY: demo test check soak bench build tidy

## demo: the main job on its embedded default (throwaway PostgreSQL, fake API);
## installs PostgreSQL's server package first when it is missing
demo:
	$(GO) run ./cmd/sendonce demo

## test: every test, with the race detector, against a throwaway PostgreSQL.
## First installs what the tests take from the machine when it is missing
## (PostgreSQL's server package, Chromium for the browser tests, PgBouncer for
## the pooler tests; see internal/machine/sysdeps), saying what it runs.
test:
	$(GO) run ./internal/cmd/sysdeps postgresql chromium pgbouncer
	$(GO) vet $(PKGS)
	$(GO) run ./internal/cmd/withpg -- $(GO) test -race -count=1 -timeout 20m $(PKGS)

## check: the fast suite for day-to-day work: vet, and the tests with the
## race detector in -short mode (the integration suite, and the tests that
## build a release or run the demo's processes, skip). `make test` is the
## full suite, which CI runs.
check:
	$(GO) run ./internal/cmd/sysdeps postgresql chromium
	$(GO) vet $(PKGS)
	$(GO) run ./internal/cmd/withpg -- $(GO) test -race -short -count=1 -timeout 10m $(PKGS)

## soak: the randomized whole-system test (integration.TestSystem) for 20
## minutes: seeds one after another from SOAK_SEED (default 1); a failing seed
## prints the command that replays it.
SOAK_BUDGET ?= 20m
SOAK_SEED ?= 1
soak:
	$(GO) run ./internal/cmd/sysdeps postgresql
	$(GO) test -race -count=1 -timeout 60m ./integration/ -run 'TestSystem' -v \
		-system.seeds $(SOAK_SEED) -system.budget $(SOAK_BUDGET)

## bench: throughput, latency and memory against a throwaway durable PostgreSQL
## (or BENCH_DATABASE_URL / DATABASE_URL); prints the table and writes BENCHMARKS.md.
## BENCHFLAGS=-quick for one smaller run; see `go run ./cmd/internal/cmd/bench -h`.
bench:
	$(GO) run ./cmd/internal/cmd/bench $(BENCHFLAGS)

## build: the two binaries into ./bin (named: ./cmd/... also holds the bench's
## command, cmd/internal/cmd/bench)
build:
	$(GO) build -o bin/ ./cmd/sendonce ./cmd/openemail-fake

## tidy: go mod tidy in both modules. cmd/go.mod requires the library at a
## version go.work stands in for, which go mod tidy (it ignores go.work) cannot
## fetch: the command's tidy runs with a replace to this checkout, dropped after.
tidy:
	$(GO) mod tidy
	cd cmd && $(GO) mod edit -replace github.com/sendonce/sendonce=.. && \
		{ $(GO) mod tidy; s=$$?; $(GO) mod edit -dropreplace github.com/sendonce/sendonce; exit $$s; }
