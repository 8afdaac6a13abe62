// Command hookworker is an application of the test suite's: a program that
// embeds sendonce's worker with a Go status hook (worker.Config.OnStatus)
// keeping its own table, app_emailed, one row per transition it is told
// of, in the transaction that records it. TestGoStatusHookThroughKills
// SIGKILLs it mid-send and holds the table to the committed transitions.
// It reads DATABASE_URL, OPENEMAIL_API_KEY and OPENEMAIL_BASE_URL, and runs
// until SIGTERM.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hookworker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := client.New(client.WithTimeout(1500 * time.Millisecond))
	if err != nil {
		return err
	}
	hook := func(ctx context.Context, tx pgx.Tx, statuses []outbox.Status) error {
		keys := make([]string, len(statuses))
		transitions := make([]string, len(statuses))
		for i, s := range statuses {
			keys[i], transitions[i] = s.Key, string(s.Transition)
		}
		_, err := tx.Exec(ctx, `INSERT INTO app_emailed (key, transition) SELECT * FROM unnest($1::text[], $2::text[])`, keys, transitions)
		return err
	}
	w, err := worker.New(pool, &worker.Config{Client: c, Concurrency: 8, Lease: time.Second, JobTimeout: 3 * time.Second,
		RescueAfter: 4 * time.Second, OnStatus: hook})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	fmt.Println("hookworker: started")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.Stop(stopCtx)
}
