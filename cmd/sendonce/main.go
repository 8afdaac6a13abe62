// Command sendonce runs and operates the sendonce outbox: it migrates the
// database, runs the worker that sends intents through the OpenEmail API
// exactly once, enqueues intents from the shell, and inspects, cancels and
// retries them. Run `sendonce --help` for the commands, and `sendonce
// COMMAND --help` for each one's flags.
//
// The command is wiring only: flags, signals, logging and the HTTP
// listener. The SQL lives in package outbox, the sending in package worker.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, restore the default handling, so a second
	// Ctrl-C kills a shutdown that takes too long.
	go func() { <-ctx.Done(); stop() }()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}
