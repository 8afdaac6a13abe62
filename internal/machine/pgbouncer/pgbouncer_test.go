package pgbouncer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/machine/pgbouncer"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestModes shows what each mode does to a client that assumes a session
// of its own: in transaction mode, pgx's default (a named prepared
// statement per query, cached on the client connection) fails once server
// connections are shared, and QueryExecModeExec does not; in session mode
// both work.
func TestModes(t *testing.T) {
	for _, mode := range []pgbouncer.Mode{pgbouncer.Transaction, pgbouncer.Session} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			url := pgbouncer.ForTest(t, pgtest.NewDBURL(t), mode)
			defaults := queryConcurrently(t, url, false)
			exec := queryConcurrently(t, url, true)
			t.Logf("%s mode: %d of 400 queries failed with pgx's defaults, %d with QueryExecModeExec", mode, defaults, exec)
			if exec != 0 {
				t.Errorf("%s mode: %d queries in exec mode failed", mode, exec)
			}
			switch {
			case mode == pgbouncer.Transaction && defaults == 0:
				t.Errorf("transaction mode: no query with named prepared statements failed: is the pool mode really transaction?")
			case mode == pgbouncer.Session && defaults != 0:
				t.Errorf("session mode: %d queries with pgx's defaults failed", defaults)
			}
		})
	}
}

// queryConcurrently runs 400 parameterised queries from 16 client
// connections (through a bouncer with 10 server connections) and counts
// those that failed.
func queryConcurrently(t *testing.T, url string, exec bool) int {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	if exec {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var mu sync.Mutex
	failed := 0
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 25 {
				var n int
				err := pool.QueryRow(context.Background(), fmt.Sprintf("SELECT $1::int + %d", i%5), g).Scan(&n)
				var pgErr *pgconn.PgError
				if err != nil && !errors.As(err, &pgErr) {
					t.Errorf("query: %v", err)
				}
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed
}
