// Package pgtest gives tests a real PostgreSQL database of their own.
//
// The server is the one named by TEST_DATABASE_URL (or DATABASE_URL); when
// neither is set, a throwaway cluster is started from the machine's server
// binaries once per test binary and stopped by Main. Each call to NewDB
// creates a fresh database, already migrated, cloned from a template, and
// drops it when the test ends, so tests never see each other's rows.
package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/pgcluster"
	"github.com/sendonce/sendonce/migrations"
)

var (
	mu       sync.Mutex
	cluster  *pgcluster.Cluster
	server   string // URL of the server's maintenance database
	template string // name of the migrated template database
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
	if template != "" {
		dropDatabase(server, template)
		template = ""
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
	srv := ServerURL(t)
	mu.Lock()
	if template == "" {
		name := fmt.Sprintf("sendonce_tmpl_%d_%08x", os.Getpid(), rand.Uint32())
		if err := createTemplate(srv, name); err != nil {
			mu.Unlock()
			t.Fatalf("pgtest: %v", err)
		}
		template = name
	}
	tmpl := template
	mu.Unlock()

	name := fmt.Sprintf("sendonce_test_%08x%08x", rand.Uint32(), rand.Uint32())
	if err := exec(srv, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(srv, name) })
	return withDatabase(srv, name)
}

// CreateDB creates an empty database, not migrated, on the server at
// serverURL (ServerURL, or a cluster of the test's own), for tests that
// migrate it themselves (with the sendonce binary, say), and returns its
// URL. The database is dropped when the test ends.
func CreateDB(t testing.TB, serverURL, label string) string {
	t.Helper()
	name := fmt.Sprintf("sendonce_%s_%08x", label, rand.Uint32())
	if err := exec(serverURL, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(serverURL, name) })
	return withDatabase(serverURL, name)
}

func createTemplate(srv, name string) error {
	if err := exec(srv, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("create template database: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, withDatabase(srv, name))
	if err != nil {
		return fmt.Errorf("connect to template: %w", err)
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return nil
}

func dropDatabase(srv, name string) {
	_ = exec(srv, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
}

func exec(srv, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func withDatabase(srv, name string) string {
	u, err := url.Parse(srv)
	if err != nil {
		return srv
	}
	u.Path = "/" + name
	return u.String()
}
