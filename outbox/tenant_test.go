package outbox_test

// Tenants (issue 46, step 1): an intent may name one, a run and a
// schedule give theirs to their members, and the rule is the same in Go
// and in SQL.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestTenantValidationGoAndSQL holds the tenant rule in step, as
// TestTopicValidationGoAndSQL does the topic's: Intent.Validate and the
// checks of the outbox's, the runs' and the schedules' tables accept and
// refuse the same names, Go naming the field "tenant" and the value, SQL
// its check.
func TestTenantValidationGoAndSQL(t *testing.T) {
	t.Parallel()
	pool, _ := outboxtest.New(t)
	ctx := context.Background()
	for _, tt := range []struct {
		tenant string
		ok     bool
	}{
		{"acme", true},
		{"4192", true},
		{"acme.example", true},
		{"acme_eu-1", true},
		{"0b6c4b4e-7c1f-4b0e-9d1a-2f3c4d5e6f70", true}, // a UUID
		{strings.Repeat("t", 64), true},
		{strings.Repeat("t", 65), false},
		{"Acme", false},
		{"acme corp", false},
		{"-acme", false},
		{".acme", false},
		{"_acme", false},
		{"acmé", false},
		{"acme\n", false},
		{"default", false}, // the default tenant is named by none
	} {
		in := outbox.Intent{Key: "t:tenant", Payload: invoiceBody, Tenant: tt.tenant}
		goErr := in.Validate()
		var invalid *outbox.InvalidError
		switch {
		case tt.ok && goErr != nil:
			t.Errorf("tenant %q: Go refuses it: %v", tt.tenant, goErr)
		case !tt.ok && (!errors.As(goErr, &invalid) || invalid.Field != "tenant" ||
			!strings.Contains(goErr.Error(), strings.TrimSuffix(fmt.Sprintf("%q", tt.tenant[:min(len(tt.tenant), 60)]), `"`)) || !strings.Contains(goErr.Error(), "sendonce_outbox_tenant_check")):
			t.Errorf("tenant %q: Go says %v, want it refused naming the field, the value and the check", tt.tenant, goErr)
		}
		for table, insert := range map[string]string{
			"sendonce_outbox": `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, tenant) VALUES ('t:tenant', 'email', $1::jsonb, $2)`,
			"sendonce_run":    `INSERT INTO sendonce_run (key, tenant) SELECT 't:tenant', $2 WHERE $1::text IS NOT NULL`,
			"sendonce_schedule": `INSERT INTO sendonce_schedule (name, spec, producer, next_at, tenant)
				SELECT 't-tenant', '@hourly', 'p', now(), $2 WHERE $1::text IS NOT NULL`,
		} {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, sqlErr := tx.Exec(ctx, insert, invoiceBody, tt.tenant)
			_ = tx.Rollback(ctx)
			switch {
			case tt.ok && sqlErr != nil:
				t.Errorf("tenant %q: %s refuses it: %v", tt.tenant, table, sqlErr)
			case !tt.ok && (sqlErr == nil || !strings.Contains(sqlErr.Error(), table+"_tenant_check")):
				t.Errorf("tenant %q: %s says %v, want it refused naming %s_tenant_check", tt.tenant, table, sqlErr, table)
			}
		}
	}
	// The Go API refuses a run's and a schedule's bad tenant as the
	// intent's.
	_, ob := outboxtest.New(t)
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "r", Tenant: "Acme", Intents: members("r", 1)}); !isInvalid(err, "tenant") {
		t.Errorf("EnqueueRun with tenant Acme: %v, want an InvalidError naming tenant", err)
	}
	if _, err := ob.SaveSchedule(ctx, outbox.Schedule{Name: "s", Spec: "@hourly", Producer: "p", Tenant: "default"}); !isInvalid(err, "tenant") {
		t.Errorf("SaveSchedule with tenant default: %v, want an InvalidError naming tenant", err)
	}
}

func isInvalid(err error, field string) bool {
	var inv *outbox.InvalidError
	return errors.As(err, &inv) && inv.Field == field
}

// TestEnqueueManyTenants: EnqueueMany stores each intent's tenant, through
// the statement (a small call, and a large one in a REPEATABLE READ
// transaction) and through COPY (a large call) alike: the default tenant
// as NULL, a named one as given. The results, Get and List say the same,
// and List keeps one tenant's intents.
func TestEnqueueManyTenants(t *testing.T) {
	t.Parallel()
	pool, ob := outboxtest.New(t)
	ctx := context.Background()
	tenantOf := func(i int) string { return []string{"", "acme", "beta.example"}[i%3] }
	for _, p := range []struct {
		prefix string
		n      int
		iso    pgx.TxIsoLevel
		copies bool
	}{{"small", 6, pgx.ReadCommitted, false}, {"copied", copySize, pgx.ReadCommitted, true}, {"inserted", copySize, pgx.RepeatableRead, false}} {
		in := batchOf(p.prefix, p.n)
		for i := range in {
			in[i].Tenant = tenantOf(i)
		}
		res, copied, _ := enqueueCounting(t, pool, ob, p.iso, in)
		if (copied == len(in)) != p.copies {
			t.Errorf("%s: %d of %d rows copied", p.prefix, copied, len(in))
		}
		for i, r := range res {
			if r.Record.Tenant != tenantOf(i) {
				t.Errorf("%s: result %d has tenant %q, want %q", p.prefix, i, r.Record.Tenant, tenantOf(i))
			}
		}
		for _, i := range []int{0, 1, 2} {
			if got := outboxtest.Get(t, ob, in[i].Key).Tenant; got != tenantOf(i) {
				t.Errorf("%s: Get(%s).Tenant = %q, want %q", p.prefix, in[i].Key, got, tenantOf(i))
			}
		}
		// The default tenant is stored as NULL, a named one as given.
		var nulls, acme int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant IS NULL), count(*) FILTER (WHERE tenant = 'acme')
			FROM sendonce_outbox WHERE starts_with(idempotency_key, $1)`, p.prefix+":").Scan(&nulls, &acme)
		if err != nil {
			t.Fatal(err)
		}
		if want := (p.n + 2) / 3; nulls != want || acme != (p.n+1)/3 {
			t.Errorf("%s: %d rows of the default tenant (NULL), %d of acme; want %d and %d", p.prefix, nulls, acme, want, (p.n+1)/3)
		}
	}
	for tenant, want := range map[string]int{"acme": 2, outbox.DefaultTenant: 2} {
		recs, err := ob.List(ctx, &outbox.ListParams{KeyPrefix: "small:", Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != want {
			t.Errorf("List of tenant %s: %d intents, want %d", tenant, len(recs), want)
		}
		for _, r := range recs {
			if outbox.TenantName(r.Tenant) != tenant {
				t.Errorf("List of tenant %s: %s is tenant %q", tenant, r.Key, r.Tenant)
			}
		}
	}
	if _, err := ob.List(ctx, &outbox.ListParams{Tenant: "Acme"}); !isInvalid(err, "tenant") {
		t.Errorf("List of tenant Acme: %v, want an InvalidError naming tenant", err)
	}
}

// TestRunTenant: a run's members are its tenant's. A member that names
// none takes the run's, through the statement and through COPY; one that
// names another is refused, naming both, before anything is written; a
// run there already keeps its tenant: enqueued into with none, its members
// take it, with another, the call is refused. The run's status says its
// tenant.
func TestRunTenant(t *testing.T) {
	t.Parallel()
	pool, ob := outboxtest.New(t)
	ctx := context.Background()
	for _, n := range []int{3, copySize} {
		key := fmt.Sprintf("billing:%d", n)
		in := members(key, n)
		in[1].Tenant = "acme" // the run's own: taken
		res, err := enqueueRun(t, pool, ob, outbox.Run{Key: key, Tenant: "acme", Intents: in})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res.Intents {
			if r.Record.Tenant != "acme" {
				t.Fatalf("%s: member %d has tenant %q, want the run's, acme", key, i, r.Record.Tenant)
			}
		}
		if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_outbox WHERE run_key = $1 AND tenant = 'acme'`, key); n != len(in) {
			t.Errorf("%s: %d members stored with tenant acme, want %d", key, n, len(in))
		}
		st, err := ob.RunStatus(ctx, key)
		if err != nil || st.Tenant != "acme" {
			t.Errorf("RunStatus(%s): tenant %q, %v; want acme", key, st.Tenant, err)
		}
	}

	// A member naming another tenant: refused, naming both, nothing written.
	in := members("other", 2)
	in[1].Tenant = "beta"
	_, err := enqueueRun(t, pool, ob, outbox.Run{Key: "other", Tenant: "acme", Intents: in})
	want := `outbox: intent 1: invalid tenant: intent "other:1" names tenant "beta", but its run "other" is tenant "acme"`
	if !isInvalid(err, "tenant") || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("member of another tenant: %v, want %q…", err, want)
	}
	// A run of the default tenant takes no member of a named one.
	_, err = enqueueRun(t, pool, ob, outbox.Run{Key: "other", Intents: in})
	if !isInvalid(err, "tenant") || !strings.Contains(err.Error(), `its run "other" is tenant "default"`) {
		t.Errorf("member of tenant beta in a run of the default tenant: %v", err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_run WHERE key = 'other'`); n != 0 {
		t.Errorf("a refused run was written")
	}

	// A run there already: enqueued into with no tenant, its members take
	// its tenant; with another, the call is refused.
	res, err := enqueueRun(t, pool, ob, outbox.Run{Key: "billing:3", Intents: members("billing:3:more", 1)})
	if err != nil || res.Created || res.Intents[0].Record.Tenant != "acme" {
		t.Fatalf("enqueue into the run again: %+v, %v; want its member of tenant acme", res, err)
	}
	_, err = enqueueRun(t, pool, ob, outbox.Run{Key: "billing:3", Tenant: "beta", Intents: members("billing:3:beta", 1)})
	if !isInvalid(err, "tenant") || !strings.Contains(err.Error(), `run "billing:3" is tenant "acme", not "beta"`) {
		t.Errorf("enqueue into the run with another tenant: %v", err)
	}
	_, err = enqueueRun(t, pool, ob, outbox.Run{Key: "billing:3", Intents: []outbox.Intent{{Key: "billing:3:x", Payload: invoiceBody, Tenant: "beta"}}})
	if !isInvalid(err, "tenant") || !strings.Contains(err.Error(), `its run "billing:3" is tenant "acme"`) {
		t.Errorf("member of tenant beta into the run of acme, the run given no tenant: %v", err)
	}
}

// TestSQLRunTenant: a member inserted by plain SQL with a run's key takes
// the run's tenant when it names none, and is refused, with both named,
// when it names another, as EnqueueRun refuses it; an UPDATE cannot move a
// member to another tenant, nor a run change its tenant.
func TestSQLRunTenant(t *testing.T) {
	t.Parallel()
	pool, ob := outboxtest.New(t)
	ctx := context.Background()
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "news", Tenant: "acme", Intents: members("news", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := enqueueRun(t, pool, ob, outbox.Run{Key: "plain", Intents: members("plain", 1)}); err != nil {
		t.Fatal(err)
	}
	insert := func(run, key, tenant string) error {
		_, err := pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key, tenant)
			VALUES ($1, 'email', $2, $3, nullif($4, ''))`, key, invoiceBody, run, tenant)
		return err
	}
	for _, m := range []struct{ run, key, tenant, want string }{
		{"news", "news:sql-none", "", "acme"},
		{"news", "news:sql-same", "acme", "acme"},
		{"plain", "plain:sql-none", "", ""},
	} {
		if err := insert(m.run, m.key, m.tenant); err != nil {
			t.Fatalf("%s: %v", m.key, err)
		}
		if got := outboxtest.Get(t, ob, m.key).Tenant; got != m.want {
			t.Errorf("%s: tenant %q, want %q", m.key, got, m.want)
		}
	}
	for _, m := range []struct{ run, key, tenant, want string }{
		{"news", "news:sql-beta", "beta", `sendonce: intent 'news:sql-beta' names tenant 'beta', but its run 'news' is tenant 'acme'`},
		{"plain", "plain:sql-beta", "beta", `sendonce: intent 'plain:sql-beta' names tenant 'beta', but its run 'plain' is tenant 'default'`},
	} {
		if err := insert(m.run, m.key, m.tenant); err == nil || !strings.Contains(err.Error(), m.want) {
			t.Errorf("%s: %v, want %q", m.key, err, m.want)
		}
	}
	for _, stmt := range []string{
		`UPDATE sendonce_outbox SET tenant = 'beta' WHERE idempotency_key = 'news:0'`,
		`UPDATE sendonce_outbox SET run_key = 'plain' WHERE idempotency_key = 'news:0'`,
	} {
		if _, err := pool.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "names tenant") {
			t.Errorf("%s: %v, want it refused", stmt, err)
		}
	}
	_, err := pool.Exec(ctx, `UPDATE sendonce_run SET tenant = 'beta' WHERE key = 'news'`)
	if want := `sendonce: cannot change the tenant of run 'news' from 'acme' to 'beta'`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a run's tenant changed: %v, want %q", err, want)
	}
	// Moving a member of the default tenant to no run, or its run's tenant
	// given again, is taken.
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET tenant = 'acme' WHERE idempotency_key = 'news:0'`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET run_key = NULL WHERE idempotency_key = 'plain:0'`)
}
