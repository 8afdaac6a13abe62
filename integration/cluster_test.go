package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// newDatabase creates an empty database on the server and migrates it
// with `sendonce migrate`. When the test ends, after its processes are
// gone, every table is dumped as text for the secrets check and the
// database is dropped. It returns the database's URL and a pool for the
// test's own reads.
func newDatabase(t testing.TB, serverURL, label string) (string, *pgxpool.Pool) {
	t.Helper()
	dbURL := pgtest.CreateDB(t, serverURL, "it_"+label)

	mustRun(t, "migrate", env{DatabaseURL: dbURL}, nil, "migrate")

	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(func() { dumpDatabase(t, pool, label) })
	return dbURL, pool
}

// dumpDatabase keeps every row of every table of the database as text
// (errors, metadata and payloads included) for the secrets check.
func dumpDatabase(t testing.TB, pool *pgxpool.Pool, label string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tables, err := queryStrings(ctx, pool,
		`SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		 WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Errorf("dump %s: %v", label, err)
		return
	}
	var b strings.Builder
	rows := 0
	for _, table := range tables {
		lines, err := queryStrings(ctx, pool, "SELECT t::text FROM "+table+" t")
		if err != nil {
			t.Errorf("dump %s: %v", table, err)
			continue
		}
		for _, l := range lines {
			b.WriteString(table + " " + l + "\n")
		}
		rows += len(lines)
	}
	keepText(t.Name()+"/database dump", b.String())
	t.Logf("kept %d rows of %d tables of %s for the secrets check", rows, len(tables), label)
}

func queryStrings(ctx context.Context, db *pgxpool.Pool, sql string, args ...any) ([]string, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
