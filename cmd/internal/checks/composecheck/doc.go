// Package composecheck holds no code, only a test: it loads the
// repository's docker-compose.yml with the Compose project's own loader
// (github.com/compose-spec/compose-go, which `docker compose` itself uses)
// and checks what the file promises: the four services, the order they
// start in, and a worker that reaches the fake API over loopback.
//
// It exists because no Docker engine runs where the tests run, and the
// docker CLI there has no compose plugin, so `docker compose config` is
// not available; the loader parses, interpolates, validates against the
// Compose schema and checks consistency just as that command does, in
// `go test ./...`.
package composecheck
