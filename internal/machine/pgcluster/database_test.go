package pgcluster_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A database from a template holds the template's tables; Drop removes it
// even while a connection to it is open.
func TestCreateFromTemplateAndDrop(t *testing.T) {
	ctx := t.Context()
	srv := pgtest.ServerURL(t)

	tmpl, err := pgcluster.CreateDatabase(ctx, srv, "pgcluster_tmpl_", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tmpl.Drop(context.Background()) })
	if !strings.HasPrefix(tmpl.Name, "pgcluster_tmpl_") || !strings.Contains(tmpl.URL, "/"+tmpl.Name) {
		t.Errorf("Name %q, URL %q", tmpl.Name, tmpl.URL)
	}
	// Closed at once: CREATE DATABASE ... TEMPLATE refuses a template in use.
	conn := connect(t, tmpl.URL)
	if _, err := conn.Exec(ctx, "CREATE TABLE marker (n int)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	db, err := pgcluster.CreateDatabase(ctx, srv, "pgcluster_copy_", tmpl.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Drop(context.Background()) })
	var table *string
	if err := connect(t, db.URL).QueryRow(ctx, "SELECT to_regclass('marker')::text").Scan(&table); err != nil || table == nil {
		t.Errorf("the copy lacks the template's table (err %v)", err)
	}

	if err := db.Drop(ctx); err != nil {
		t.Fatalf("Drop with a connection open: %v", err)
	}
	var n int
	if err := connect(t, srv).QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", db.Name).Scan(&n); err != nil || n != 0 {
		t.Errorf("after Drop, %d databases named %s (err %v)", n, db.Name, err)
	}
}

func TestDatabaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h:5432/postgres?sslmode=disable": "postgres://u:p@h:5432/other?sslmode=disable",
		"postgresql://h/":               "postgresql://h/other",
		"host=h user=u dbname=postgres": "host=h user=u dbname=postgres dbname=other",
	} {
		got, err := pgcluster.DatabaseURL(in, "other")
		if err != nil || got != want {
			t.Errorf("DatabaseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := pgcluster.DatabaseURL("postgres://u:S3cret@h:bad/x", "other"); err == nil || strings.Contains(err.Error(), "S3cret") {
		t.Errorf("bad URL: %v, want an error without the password", err)
	}
}

// connect opens a connection that is closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
