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

// TestTenantMigration: the tenants' migration (issue 46) applies on a
// database that holds intents, runs and schedules already: every one of
// them is in the default tenant (NULL), no row rewritten, and a run made
// before it gives its new members the default tenant. New rows are held to
// the rule, old ones pass it. Its Down section takes the columns away, and
// Up applies again.
func TestTenantMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	files, err := filepath.Glob("sql/*_tenant.sql")
	if err != nil || len(files) != 1 {
		t.Fatalf("the tenants' migration: %v, %v", files, err)
	}
	version, err := strconv.ParseInt(strings.SplitN(filepath.Base(files[0]), "_", 2)[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.DownTo(ctx, pool, version-1); err != nil {
		t.Fatalf("down to %d: %v", version-1, err)
	}
	const body = `{"from":"billing@example.com","to":["ada@example.com"],"subject":"Invoice","text":"x"}`
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key) VALUES ('billing:2026-11')`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_schedule (name, spec, producer, next_at) VALUES ('monthly', '0 6 1 * *', 'invoices', now())`)
	for _, stmt := range []string{
		`INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ('invoice:1', 'email', '` + body + `')`,
		`INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key) VALUES ('billing:2026-11:1', 'email', '` + body + `', 'billing:2026-11')`,
	} {
		pgtest.Exec(t, pool, stmt)
	}
	xmin := func() string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT string_agg(xmin::text, ',' ORDER BY id) FROM sendonce_outbox`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := xmin()
	if _, err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("up: %v", err)
	}
	if after := xmin(); after != before {
		t.Errorf("the migration rewrote the outbox's rows (xmin %s, then %s)", before, after)
	}
	var tenanted int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM sendonce_outbox WHERE tenant IS NOT NULL)
		+ (SELECT count(*) FROM sendonce_run WHERE tenant IS NOT NULL) + (SELECT count(*) FROM sendonce_schedule WHERE tenant IS NOT NULL)`).Scan(&tenanted); err != nil {
		t.Fatal(err)
	}
	if tenanted != 0 {
		t.Errorf("%d rows named a tenant after the migration, want every one in the default tenant", tenanted)
	}
	// The old rows pass the rule (its check, NOT VALID, validates).
	pgtest.Exec(t, pool, `ALTER TABLE sendonce_outbox VALIDATE CONSTRAINT sendonce_outbox_tenant_check`)
	// A new member of the old run takes its tenant, the default; one that
	// names another is refused; a bad name is refused.
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key) VALUES ('billing:2026-11:2', 'email', '`+body+`', 'billing:2026-11')`)
	for stmt, want := range map[string]string{
		`INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key, tenant) VALUES ('billing:2026-11:3', 'email', '` + body + `', 'billing:2026-11', 'acme')`: "is tenant 'default'",
		`INSERT INTO sendonce_outbox (idempotency_key, kind, payload, tenant) VALUES ('invoice:2', 'email', '` + body + `', 'Acme')`:                                     "sendonce_outbox_tenant_check",
	} {
		if _, err := pool.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", stmt, err, want)
		}
	}

	if err := migrations.DownTo(ctx, pool, version-1); err != nil {
		t.Fatalf("down again: %v", err)
	}
	var columns int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE column_name = 'tenant'
		AND table_name IN ('sendonce_outbox', 'sendonce_run', 'sendonce_schedule')`).Scan(&columns); err != nil || columns != 0 {
		t.Fatalf("after Down, %d tenant columns (%v), want none", columns, err)
	}
	if _, err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
