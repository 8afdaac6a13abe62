package migrations_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// update regenerates schema.sql instead of checking it.
var update = flag.Bool("update", false, "write schema.sql from a migrated database instead of checking it")

// schemaFile is the current schema in one file, beside the migrations.
const schemaFile = "schema.sql"

// regenerate is the one command that rewrites schemaFile.
const regenerate = "go run ./internal/cmd/withpg -- go test ./migrations -run TestSchemaFile -update"

// TestSchemaFile checks that schema.sql is the schema the migrations leave:
// sendonce's tables, functions, triggers and indexes as pg_dump prints them
// from a migrated database (River's own objects and the migrations' version
// table left out), so a reader finds each function's current body in one
// place. With -update it writes the file.
func TestSchemaFile(t *testing.T) {
	t.Parallel()
	got := dumpSchema(t, pgtest.NewDBURL(t))
	if *update {
		if err := os.WriteFile(schemaFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", schemaFile, len(got))
		return
	}
	want, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatalf("%v: write it with: %s", err, regenerate)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("migrations/%s is not the schema the migrations leave (a migration changed it): regenerate it with\n\t%s\nand commit it; first difference:\n%s",
			schemaFile, regenerate, firstDifference(string(want), string(got)))
	}
}

// schemaHeader opens schema.sql.
const schemaHeader = `-- The schema sendonce's migrations leave (sql/), as pg_dump prints it from
-- a migrated database: sendonce's objects only, not River's. Written by
-- TestSchemaFile; do not edit it by hand. After adding a migration:
--   ` + regenerate + `
`

// dumpSchema is the normalised pg_dump --schema-only of the database.
func dumpSchema(t *testing.T, dbURL string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgtestTimeout)
	defer cancel()
	pgDump, err := findPgDump(ctx, dbURL)
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	cmd := exec.CommandContext(ctx, pgDump, "--schema-only", "--no-owner", "--no-privileges", "--dbname", dbURL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump --schema-only: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return []byte(schemaHeader + normaliseDump(string(out)))
}

// findPgDump is the pg_dump of the server's major version: the server
// package's own (/usr/lib/postgresql/N/bin), else the one beside the
// server binaries pgcluster finds, else the one on $PATH. pg_dump refuses a
// server newer than itself, and prints a schema as its version does.
func findPgDump(ctx context.Context, dbURL string) (string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var num int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		return "", err
	}
	candidates := []string{fmt.Sprintf("/usr/lib/postgresql/%d/bin/pg_dump", num/10000)}
	if dir, err := pgcluster.BinDir(); err == nil {
		candidates = append(candidates, filepath.Join(dir, "pg_dump"))
		if real, err := filepath.EvalSymlinks(filepath.Join(dir, "pg_ctl")); err == nil {
			candidates = append(candidates, filepath.Join(filepath.Dir(real), "pg_dump"))
		}
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return exec.LookPath("pg_dump")
}

const pgtestTimeout = 2 * time.Minute

// objectHeader starts each object of a dump:
// "-- Name: sendonce_outbox; Type: TABLE; Schema: public; Owner: -".
var objectHeader = regexp.MustCompile(`(?m)^-- (?:Data for )?Name: ([^;]*); Type: ([^;]*);.*$`)

// normaliseDump keeps the objects of a dump that are sendonce's, without
// the comments, SET lines and client commands that differ between runs
// and versions, and with one blank line between statements.
func normaliseDump(dump string) string {
	locs := objectHeader.FindAllStringSubmatchIndex(dump, -1)
	var b strings.Builder
	for i, loc := range locs {
		name, typ := dump[loc[2]:loc[3]], dump[loc[4]:loc[5]]
		end := len(dump)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		if !sendoncesObject(name) {
			continue
		}
		body := cleanStatements(dump[loc[1]:end])
		if body == "" {
			continue
		}
		fmt.Fprintf(&b, "\n-- %s %s\n%s\n", typ, name, body)
	}
	return b.String()
}

// sendoncesObject reports whether a dumped object (its Name: a table,
// "table constraint", "function(args)") is sendonce's: one of its words
// starts with sendonce_, and it is not the migrations' version table.
func sendoncesObject(name string) bool {
	if strings.Contains(name, "sendonce_schema_migrations") {
		return false
	}
	for w := range strings.FieldsSeq(name) {
		if strings.HasPrefix(w, "sendonce_") {
			return true
		}
	}
	return false
}

// dumpNoise matches the lines of pg_dump's own that are not the schema:
// its comment lines, SET and set_config lines, and client commands
// (\restrict, with a key that differs on every run).
var dumpNoise = regexp.MustCompile(`^(?:--$|-- PostgreSQL database dump|-- Dumped |SET [a-z_]+ = .*;$|SELECT pg_catalog\.set_config\(|\\)`)

// cleanStatements drops dumpNoise and blank lines at either end.
func cleanStatements(s string) string {
	var keep []string
	for line := range strings.SplitSeq(s, "\n") {
		if dumpNoise.MatchString(line) {
			continue
		}
		keep = append(keep, strings.TrimRight(line, " \t"))
	}
	return strings.Trim(strings.Join(keep, "\n"), "\n")
}

// firstDifference shows the first line where two texts differ, with a
// little context.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n\tschema.sql: %q\n\tmigrated:   %q", i+1, wl, gl)
		}
	}
	return "(none)"
}
