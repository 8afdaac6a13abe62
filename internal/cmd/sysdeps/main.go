// Command sysdeps makes sure the programs that the tests take from the
// machine are there, installing the distribution's packages for the ones
// that are missing (see package internal/machine/sysdeps). `make test` runs it
// first:
//
//	go run ./internal/cmd/sysdeps postgresql chromium pgbouncer
//
// It exits 0 even when it cannot install one: the tests that need it then
// fail (PostgreSQL, PgBouncer) or skip (Chromium) with the same advice.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/internal/machine/sysdeps"
)

var deps = map[string]sysdeps.Dep{
	"postgresql": pgcluster.Binaries,
	"chromium":   sysdeps.Chromium,
	"pgbouncer":  sysdeps.PgBouncer,
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for _, name := range os.Args[1:] {
		d, ok := deps[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "sysdeps: unknown %q: want postgresql, chromium or pgbouncer\n", name)
			os.Exit(2)
		}
		if _, err := sysdeps.Ensure(ctx, d, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "sysdeps: %v\n", err)
		}
	}
}
