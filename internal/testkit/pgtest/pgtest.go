// Package pgtest gives tests a real PostgreSQL database of their own.
//
// The server is the one named by TEST_DATABASE_URL (or DATABASE_URL); when
// neither is set, a throwaway cluster is started from the machine's server
// binaries once per test binary and stopped by Main. Each call to NewDB
// creates a fresh database, already migrated, cloned from a template, and
// drops it when the test ends, so tests never see each other's rows.
//
// The databases themselves are made and dropped by
// [pgcluster.CreateDatabase], as the benchmarks' own is.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/migrations"
)

var (
	mu       sync.Mutex
	cluster  *pgcluster.Cluster
	server   string              // URL of the server's maintenance database
	template *pgcluster.Database // the migrated template, once made
	setupErr error
)

// Main runs the tests of a package and then stops the cluster it started,
// if any. Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	Close()
	os.Exit(code)
}

// Close drops the template and stops the cluster this process started, if
// any. Main calls it; a TestMain of its own calls it after m.Run.
func Close() {
	mu.Lock()
	defer mu.Unlock()
	if template != nil {
		drop(template)
		template = nil
	}
	if cluster != nil {
		cluster.Stop()
		cluster, server = nil, ""
	}
}

// ServerURL returns the URL of the server's maintenance database, starting
// a cluster first if need be. It fails the test when no server can be had.
func ServerURL(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if err := ensureServer(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return server
}

func ensureServer() error {
	if server != "" || setupErr != nil {
		return setupErr
	}
	for _, name := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(name); v != "" {
			server = v
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		setupErr = fmt.Errorf("no TEST_DATABASE_URL or DATABASE_URL set, and no throwaway server could be started: %w", err)
		return setupErr
	}
	cluster, server = c, c.URL
	return nil
}

// NewDB creates a fresh, migrated database for this test and returns a pool
// connected to it. The database is dropped when the test ends.
func NewDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), NewDBURL(t))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewDBURL is NewDB for callers that connect by themselves (other
// processes, say): it returns the new database's URL.
func NewDBURL(t testing.TB) string {
	t.Helper()
	srv, tmpl, err := serverAndTemplate()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return create(t, srv, "sendonce_test_", tmpl)
}

// Exec runs a statement for a test's set-up, failing the test on error.
func Exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// ExampleDB is NewDB for Example functions, which have no *testing.T: it
// panics when no database can be had, and done closes the pool and drops
// the database.
func ExampleDB() (pool *pgxpool.Pool, done func()) {
	srv, tmpl, err := serverAndTemplate()
	if err != nil {
		panic("pgtest: " + err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgcluster.CreateDatabase(ctx, srv, "sendonce_example_", tmpl)
	if err != nil {
		panic("pgtest: " + err.Error())
	}
	if pool, err = pgxpool.New(ctx, db.URL); err != nil {
		drop(db)
		panic("pgtest: " + err.Error())
	}
	return pool, func() { pool.Close(); drop(db) }
}

// serverAndTemplate returns the server's URL and the migrated template's
// name, making either first if need be.
func serverAndTemplate() (srv, tmpl string, err error) {
	mu.Lock()
	defer mu.Unlock()
	if err := ensureServer(); err != nil {
		return "", "", err
	}
	if template == nil {
		if template, err = createTemplate(server); err != nil {
			return "", "", err
		}
	}
	return server, template.Name, nil
}

// NewCluster starts a throwaway cluster of the test's own, for a test that
// crashes or stops its server, and stops it when the test ends. Durable
// in opts keeps fsync on, for a test whose crash must not lose commits.
func NewCluster(t testing.TB, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("pgtest: start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	return c
}

// CreateDB creates an empty database, not migrated, on the server at
// serverURL (ServerURL, or a cluster of the test's own), for tests that
// migrate it themselves (with the sendonce binary, say), and returns its
// URL. The database is dropped when the test ends.
func CreateDB(t testing.TB, serverURL, label string) string {
	t.Helper()
	return create(t, serverURL, "sendonce_"+label+"_", "")
}

// create makes a database (a copy of template, if given) that is dropped
// when the test ends, and returns its URL.
func create(t testing.TB, serverURL, prefix, template string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgcluster.CreateDatabase(ctx, serverURL, prefix, template)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { drop(db) })
	return db.URL
}

// createTemplate makes the database every test's is cloned from:
// migrated once, then never connected to again (CREATE DATABASE ...
// TEMPLATE refuses a template with connections).
func createTemplate(srv string) (*pgcluster.Database, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgcluster.CreateDatabase(ctx, srv, fmt.Sprintf("sendonce_tmpl_%d_", os.Getpid()), "")
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, db.URL)
	if err == nil {
		_, err = migrations.Up(ctx, pool)
		pool.Close()
	}
	if err != nil {
		drop(db)
		return nil, fmt.Errorf("migrate the template: %w", err)
	}
	return db, nil
}

// drop drops a database at the end of a test or of the run. A failure
// leaves a database behind but takes nothing from what the test proved,
// so it is ignored.
func drop(db *pgcluster.Database) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = db.Drop(ctx)
}
