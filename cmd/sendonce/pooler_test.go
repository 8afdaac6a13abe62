package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/machine/pgbouncer"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// TestMigrateThroughPooler runs `sendonce migrate` on an empty database
// through PgBouncer, and directly, twice at once and then again, with
// nothing said about the pooler: the migrations apply once, the second run
// waits for the first, the third is a no-op, and no lock is left behind on
// a server connection that the pooler keeps (a session's advisory lock
// taken through transaction mode would stay on whichever server connection
// ran it, and its unlock run on another). The second run must not wait
// inside a statement: CREATE INDEX CONCURRENTLY (migration 5) waits for
// every statement that started before it, and would wait for ever.
func TestMigrateThroughPooler(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgbouncer.Mode{pgbouncer.Transaction, pgbouncer.Session, "direct"} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			direct := emptyDatabase(t)
			url := direct
			if mode != "direct" {
				url = pgbouncer.ForTest(t, direct, mode)
			}
			env := dbEnv(url)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			migrate := func() result {
				var out, errb strings.Builder
				code := run(ctx, []string{"migrate"}, mapEnv(env), strings.NewReader(""), &out, &errb)
				return result{code, out.String(), errb.String()}
			}
			var wg sync.WaitGroup
			results := make([]result, 2)
			for i := range results {
				wg.Go(func() { results[i] = migrate() })
			}
			wg.Wait()
			applied := 0
			for _, r := range results {
				wantOK(t, r)
				if strings.HasPrefix(r.stdout, "applied ") {
					applied++
				}
			}
			if applied != 1 {
				t.Errorf("%d of two concurrent migrations applied anything, want 1: %v", applied, results)
			}
			if r := migrate(); r.code != 0 || r.stdout != "already up to date\n" {
				t.Errorf("a third migrate: %s", r)
			}
			pool := poolFor(t, direct)
			if n := count(t, pool, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); n != 0 {
				t.Errorf("%d advisory locks left on the server after the migrations", n)
			}
			if n := count(t, pool, `SELECT count(*) FROM sendonce_schema_migrations WHERE version_id > 0`); n == 0 {
				t.Errorf("no sendonce migration recorded")
			}
		})
	}
}

// TestWorkThroughTransactionPooler runs producers (sendonce enqueue) and
// a worker, every connection through PgBouncer in transaction mode, with
// the pooler named only in the environment (SENDONCE_POOLER=transaction):
// the worker polls, and not one statement of the producers, the worker or
// River fails (no River job records an error; the issue saw 2,280 failed
// and retried jobs for 360 intents with pgx's defaults).
func TestWorkThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewDBURL(t)
	fake := fakeapi.NewTest(t, fakeapi.Config{})
	env := workEnv(pgbouncer.ForTest(t, direct, pgbouncer.Transaction), fake)
	env["SENDONCE_POOLER"] = "transaction"
	const n = 40
	for i := range n {
		wantOK(t, sendonce(t, env, emailBody(fmt.Sprintf("user%d@example.com", i)), "enqueue", "--key", fmt.Sprintf("pooled:%d", i)))
	}
	w := startWork(t, env, fastArgs...)
	if !strings.Contains(w.stdout.String(), " poll-only=true pooler=transaction\n") {
		t.Errorf("startup line: %q, want poll-only=true pooler=transaction", w.stdout.String())
	}
	pool := poolFor(t, direct)
	eventually(t, time.Minute, "every intent sent", func() bool {
		return count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`) == n
	})
	wantOK(t, w.stop())
	if got := len(fake.Deliveries()); got != n {
		t.Errorf("%d deliveries, want %d", got, n)
	}
	if errs := count(t, pool, `SELECT count(*) FROM river_job WHERE cardinality(errors) > 0`); errs != 0 {
		t.Errorf("%d River jobs recorded errors through transaction mode", errs)
	}
	// The drain sent them, without River jobs: each in one try that
	// counted, and no error recorded on any.
	if errs := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE job_id IS NOT NULL OR tries <> 1 OR last_error IS NOT NULL`); errs != 0 {
		t.Errorf("%d intents were given a River job, tried more than once or recorded an error through transaction mode", errs)
	}
	if k := strings.Count(w.stderr.String(), "SQLSTATE"); k != 0 {
		t.Errorf("the worker logged %d database errors:\n%s", k, tail(w.stderr.String(), 2000))
	}
}

// TestPoolerFlag refuses what cannot work behind a transaction pooler,
// and values that name no pooler mode.
func TestPoolerFlag(t *testing.T) {
	t.Parallel()
	dbURL, _, env := newWorkEnv(t)
	wantError(t, sendonce(t, env, "", "status", "--pooler", "statement"), 2, "--pooler", `"statement"`, "none, session or transaction")
	env["SENDONCE_POOLER"] = "bogus"
	wantError(t, sendonce(t, env, "", "status"), 2, "SENDONCE_POOLER", "bogus")
	env["SENDONCE_POOLER"] = "transaction"
	wantError(t, sendonce(t, env, "", "work", "--poll-only=false"), 2, "--pooler transaction", "--poll-only")
	env["DATABASE_URL"] = dbURL + "&default_query_exec_mode=cache_statement"
	wantError(t, sendonce(t, env, "", "status"), 2, "default_query_exec_mode=cache_statement", "--pooler transaction")
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestPoolerHint: an error of a prepared statement that a transaction
// pooler lost or mixed up names the setting that avoids it, unless it is
// already given.
func TestPoolerHint(t *testing.T) {
	lost := fmt.Errorf("cannot check migrations: %w", &pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_1" does not exist`})
	taken := &pgconn.PgError{Code: "42P05", Message: `prepared statement "stmtcache_1" already exists`}
	for _, err := range []error{lost, taken} {
		if h := poolerNone.hint(err); !strings.Contains(h, "--pooler transaction") || !strings.Contains(h, "SENDONCE_POOLER=transaction") {
			t.Errorf("hint for %v: %q", err, h)
		}
		if h := poolerTransaction.hint(err); h != "" {
			t.Errorf("with --pooler transaction, hint for %v: %q", err, h)
		}
	}
	if h := poolerNone.hint(&pgconn.PgError{Code: "40001"}); h != "" {
		t.Errorf("hint for a serialization failure: %q", h)
	}
}
