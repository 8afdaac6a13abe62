package migrations_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/migrations"
)

// TestAddressFormsMigration: the migration of the address rule (issue 22)
// rewrites the suppression list's rows that the old rule let in and the
// new one does not take into the address each names, where RFC 5322 says
// which (a comment, whitespace around, needless quotes), and drops the
// rest, which no recipient's normal form can match any more; afterwards
// every row passes the list's check. Its Down section restores the old
// rule.
func TestAddressFormsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	files, err := filepath.Glob("sql/*_address_forms.sql")
	if err != nil || len(files) != 1 {
		t.Fatalf("the address rule's migration: %v, %v", files, err)
	}
	version, err := strconv.ParseInt(strings.SplitN(filepath.Base(files[0]), "_", 2)[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.DownTo(ctx, pool, version-1); err != nil {
		t.Fatalf("down to %d: %v", version-1, err)
	}
	// What the old rule (lower case, the bare address of "Name <addr>",
	// spaces trimmed) let on the list from webhook events and Suppress.
	for _, a := range []string{"ada@example.com (Ada)", `"bo"@example.com`, "\tcy@example.com", "Dee <dee@example.com> (work)",
		"eve@bücher.de", "Friends: fay@example.com;", "ada@example.com", `"g h"@example.com`} {
		if _, err := pool.Exec(ctx, `INSERT INTO sendonce_suppression (address, reason, source) VALUES (sendonce_address($1), 'bounced', 'webhook d1')`, a); err != nil {
			t.Fatalf("old rule, %q: %v", a, err)
		}
	}
	if _, err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("up: %v", err)
	}
	var got string
	if err := pool.QueryRow(ctx, `SELECT string_agg(address || ' ' || reason || ' ' || source, '; ' ORDER BY address) FROM sendonce_suppression`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	want := "ada@example.com bounced webhook d1; bo@example.com bounced webhook d1; cy@example.com bounced webhook d1; dee@example.com bounced webhook d1"
	if got != want {
		t.Fatalf("the list after the migration:\n%s\nwant\n%s", got, want)
	}
	var bad int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_suppression WHERE address IS DISTINCT FROM sendonce_address(address)`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d rows fail the list's check (%v)", bad, err)
	}

	if err := migrations.DownTo(ctx, pool, version-1); err != nil {
		t.Fatalf("down again: %v", err)
	}
	var old string
	if err := pool.QueryRow(ctx, `SELECT sendonce_address('Ada (x) <ADA@example.com>')`).Scan(&old); err != nil || old != "ada@example.com" {
		t.Fatalf("after Down, sendonce_address is %q (%v), want the old rule's ada@example.com", old, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload)
		VALUES ('down:1', 'email', '{"from":"a@example.com","to":["ada@example.com (Ada)"],"text":"x"}')`); err != nil {
		t.Fatalf("after Down, the old trigger refuses an address form: %v", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM sendonce_outbox`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if err := pool.QueryRow(ctx, `SELECT coalesce(sendonce_address('Ada (x) <ADA@example.com>'), 'NULL')`).Scan(&old); err != nil || old != "NULL" {
		t.Fatalf("after Up again: %q, %v", old, err)
	}
}
