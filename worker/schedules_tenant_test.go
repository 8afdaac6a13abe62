package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// TestScheduleTenant: a schedule's tenant goes to the runs it creates, and
// from them to their members, whether a SQL statement inserts them or a
// Go producer returns them; a producer's member naming another tenant
// fails the occurrence, as it would fail EnqueueRun, and leaves no run.
func TestScheduleTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	other := false
	producers := map[string]Producer{"invoices": func(ctx context.Context, tx pgx.Tx, occ Occurrence) ([]outbox.Intent, error) {
		var out []outbox.Intent
		for i := range 2 {
			out = append(out, outbox.Intent{Key: fmt.Sprintf("%s:inv_%d", occ.RunKey, i),
				Payload: fmt.Sprintf(`{"from":"billing@example.com","to":["c%d@example.com"],"subject":"Invoice","text":"x"}`, i)})
		}
		if other {
			out[1].Tenant = "beta"
		}
		return out, nil
	}}
	tk, ob := newTicker(t, producers)
	for _, s := range []outbox.Schedule{
		{Name: "digest", Spec: "@hourly", Statement: digestSQL, Tenant: "acme"},
		{Name: "invoices", Spec: "@hourly", Producer: "invoices", Tenant: "acme"},
		{Name: "plain", Spec: "@hourly", Statement: digestSQL},
	} {
		if _, err := ob.SaveSchedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	all, err := ob.Schedules(ctx)
	if err != nil || len(all) != 3 || all[0].Tenant != "acme" || all[2].Tenant != "" {
		t.Fatalf("schedules %+v, %v; want digest's and invoices' tenant acme, plain's none", all, err)
	}
	pgtest.Exec(t, tk.pool, `UPDATE sendonce_schedule SET next_at = now() - interval '1 second'`)
	if _, err := tk.tick(ctx); err != nil {
		t.Fatal(err)
	}
	runs, err := ob.Runs(ctx, nil)
	if err != nil || len(runs) != 3 {
		t.Fatalf("runs %+v, %v; want 3", runs, err)
	}
	for _, r := range runs {
		want := "acme"
		if strings.HasPrefix(r.Key, "plain:") {
			want = ""
		}
		recs, err := ob.List(ctx, &outbox.ListParams{Run: r.Key})
		if err != nil || len(recs) == 0 || r.Tenant != want {
			t.Fatalf("run %s: tenant %q, members %d, %v; want tenant %q and members", r.Key, r.Tenant, len(recs), err, want)
		}
		for _, rec := range recs {
			if rec.Tenant != want {
				t.Errorf("member %s of run %s: tenant %q, want %q", rec.Key, r.Key, rec.Tenant, want)
			}
		}
	}

	// A producer's member of another tenant fails the occurrence.
	other = true
	pgtest.Exec(t, tk.pool, `UPDATE sendonce_schedule SET next_at = now() + interval '1 hour' WHERE name <> 'invoices';
		UPDATE sendonce_schedule SET next_at = date_trunc('hour', now()) - interval '2 hours' WHERE name = 'invoices'`)
	// Its occurrence on the hour: another run than the first's.
	if n, err := tk.tick(ctx); err != nil || n != 0 {
		t.Fatalf("tick with a member of another tenant = %d, %v; want 0, nil", n, err)
	}
	all, err = ob.Schedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Name == "invoices" && (s.Failures != 1 || !strings.Contains(s.LastError, `names tenant "beta", but its run`) ||
			!strings.Contains(s.LastError, `is tenant "acme"`)) {
			t.Errorf("schedule invoices after a member of another tenant: %+v", s)
		}
	}
}
