# The two commands a newcomer needs: `make demo` and `make test`.
GO ?= go

.PHONY: demo test test-short bench soak build lint

## demo: the main job on its embedded default (throwaway PostgreSQL, fake API)
demo:
	$(GO) run ./cmd/sendonce demo

## test: every test, with the race detector, against a throwaway PostgreSQL
test:
	$(GO) vet ./...
	$(GO) run ./internal/cmd/withpg -- $(GO) test -race -count=1 -timeout 20m ./...

## build: the two binaries into ./bin
build:
	$(GO) build -o bin/ ./cmd/...
