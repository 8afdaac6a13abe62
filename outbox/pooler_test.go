package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/machine/pgbouncer"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// producers is how many producers enqueue at once through the pooler, and
// rounds how many transactions each commits.
const producers, rounds = 16, 13

// TestEnqueueThroughTransactionPooler runs 16 producers at once through
// PgBouncer in transaction mode (10 server connections, so each client
// connection's transactions run on whichever server connection is free)
// with a pool of pgx's defaults, whose own statements would each be a named
// prepared statement cached on the client connection: a server connection
// that never saw the name answers 26000, one that saw it under another
// client's 42P05. sendonce's statements name none, in every path of
// Enqueue and EnqueueMany: a new key, a key given twice in one call, a key
// already stored, a send time, a REPEATABLE READ transaction, a run.
func TestEnqueueThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewDBURL(t)
	cfg, err := pgxpool.ParseConfig(pgbouncer.ForTest(t, direct, pgbouncer.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = producers // a connection for each producer, so that they share PgBouncer's 10
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mail := func(key string) outbox.Intent {
		return outbox.Intent{Key: key, Payload: map[string]any{
			"from": "billing@example.com", "to": []string{"ada@example.com"}, "subject": "Invoice " + key, "text": "Thank you."}}
	}
	errs := runProducers(func(p, r int) error {
		key := fmt.Sprintf("invoice:p%d-r%d", p, r)
		switch r % 5 {
		case 0: // one new intent
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := ob.Enqueue(ctx, tx, mail(key)); return err })
		case 1: // many, one key twice with the payload spelt otherwise, one held for later
			later := mail(key + "-later")
			later.SendAt = time.Now().Add(time.Hour)
			again := mail(key + "-a")
			again.Payload = `{"text": "Thank you.", "to": ["ada@example.com"], "subject": "Invoice ` + key + `-a", "from": "billing@example.com"}`
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := ob.EnqueueMany(ctx, tx, []outbox.Intent{mail(key + "-a"), mail(key + "-b"), again, later})
				return err
			})
		case 2: // a key already stored: the existing intent
			res := &outbox.EnqueueResult{}
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var err error
				res, err = ob.Enqueue(ctx, tx, mail(fmt.Sprintf("invoice:p%d-r%d", p, r-2)))
				return err
			})
			if err == nil && !res.Existing {
				return fmt.Errorf("key %q again: not Existing", key)
			}
			return err
		case 3: // REPEATABLE READ (the snapshot check)
			return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
				_, err := ob.Enqueue(ctx, tx, mail(key))
				return err
			})
		default: // a run's members
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "run-" + strings.ReplaceAll(key, ":", "-"),
					Intents: []outbox.Intent{mail(key + "-m1"), mail(key + "-m2")}})
				return err
			})
		}
	})
	if len(errs) > 0 {
		t.Errorf("%d of %d producer transactions failed through transaction mode with pgx's defaults; the first: %v", len(errs), producers*rounds, errs[0])
	}
	// Every intent went in once, as its row alone: no River job.
	check, err := pgxpool.New(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	var rows, jobs int
	if err := check.QueryRow(ctx, `SELECT (SELECT count(*) FROM sendonce_outbox), (SELECT count(*) FROM river_job)`).Scan(&rows, &jobs); err != nil {
		t.Fatal(err)
	}
	want := 0
	for r := range rounds {
		want += map[int]int{0: 1, 1: 3, 2: 0, 3: 1, 4: 2}[r%5]
	}
	want *= producers
	if len(errs) == 0 && (rows != want || jobs != 0) {
		t.Errorf("%d outbox rows and %d River jobs, want %d rows and no job", rows, jobs, want)
	}
	t.Logf("transaction mode, pgx's defaults: %d producers, %d transactions, %d errors, %d intents", producers, producers*rounds, len(errs), rows)
}

// TestProducerExampleThroughTransactionPooler runs docs/library.md's producer
// (an invoice row and its email in one transaction) from 16 producers at
// once through PgBouncer in transaction mode, with the pool set as the
// docs say a producer's pool must be there: the application's own
// statements need default_query_exec_mode=exec (PgBouncer 1.18 keeps no
// prepared statements in transaction mode); sendonce's need nothing.
func TestProducerExampleThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewDBURL(t)
	url := pgbouncer.ForTest(t, direct, pgbouncer.Transaction) + "&default_query_exec_mode=exec"
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = producers // a connection for each producer, so that they share PgBouncer's 10
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY, customer_email text, amount_cents int)`); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := runProducers(func(p, r int) error {
		id := fmt.Sprintf("inv_%d_%d", p, r)
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx,
				`INSERT INTO invoices (id, customer_email, amount_cents) VALUES ($1, $2, $3)`,
				id, "ada@example.com", 4200); err != nil {
				return err
			}
			_, err := ob.Enqueue(ctx, tx, outbox.Intent{
				Key: "invoice:" + id,
				Payload: map[string]any{
					"from": "billing@example.com", "to": []string{"ada@example.com"},
					"subject": "Your invoice " + id, "text": "Thank you. Your invoice is attached.",
				},
			})
			return err
		})
	})
	if len(errs) > 0 {
		t.Errorf("%d of %d producer transactions failed; the first: %v", len(errs), producers*rounds, errs[0])
	}
	var invoices, intents int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM invoices), (SELECT count(*) FROM sendonce_outbox)`).Scan(&invoices, &intents); err != nil {
		t.Fatal(err)
	}
	if invoices != producers*rounds || intents != producers*rounds {
		t.Errorf("%d invoices and %d intents committed, want %d of each", invoices, intents, producers*rounds)
	}
	t.Logf("docs/library.md producer through transaction mode: %d producers, %d transactions, %d errors", producers, producers*rounds, len(errs))
}

// runProducers runs rounds transactions in each of producers goroutines at
// once and returns the errors.
func runProducers(tx func(producer, round int) error) []error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for r := range rounds {
				if err := tx(p, r); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}
