package store

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/planguard"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestTenantReadsUseTheDueIndex: the operator's reads of tenants find the
// tenants and count their backlogs through sendonce_outbox_tenant_due_idx,
// and never read the outbox whole, whether the planner is left to choose
// (fresh statistics of an outbox of 60,000 pending intents, most of them
// of two tenants) or guarded as they run (planguard.Run), and read it in
// the index's order, so that each count stops at its cap (with bitmap
// scans off, as the reads set them).
func TestTenantReadsUseTheDueIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key, tenant) VALUES ('r', 'acme')`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, payload, run_key, tenant)
		SELECT 'p:' || g, '{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}',
			CASE WHEN g % 3 = 0 THEN 'r' END, CASE WHEN g % 3 = 0 THEN 'acme' WHEN g % 100 = 1 THEN 't' || (g % 7) END
		FROM generate_series(1, 60000) g`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, weight, rate, quota_day) VALUES ('acme', 5, 10, 1000), ('zeta', 2, NULL, NULL)`)
	pgtest.Exec(t, pool, `UPDATE sendonce_run SET state = 'paused'`)
	pgtest.Exec(t, pool, `ANALYZE`)

	for _, s := range []struct {
		name string
		sql  string
		args []any
	}{
		{"tenants", tenantsSQL, []any{"", true, 100}},
		{"tenants after", tenantsSQL, []any{"acme", false, 100}},
		{"tenant", tenantOneSQL, []any{"acme"}},
		{"in use", tenantsInUseSQL, nil},
		{"named", tenantsNamedSQL, []any{100}},
		{"other", tenantsOtherSQL, []any{100}},
	} {
		for _, guarded := range []bool{false, true} {
			var plan []string
			err := planguard.Run(ctx, pool, func(tx pgx.Tx) error {
				if !guarded {
					if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = on`); err != nil {
						return err
					}
				}
				if _, err := tx.Exec(ctx, tenantNoBitmapSQL); err != nil {
					return err
				}
				rows, err := tx.Query(ctx, "EXPLAIN "+s.sql, s.args...)
				if err != nil {
					return err
				}
				plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
				return err
			})
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			p := strings.Join(plan, "\n")
			// A bitmap scan would read a tenant's whole backlog before the
			// count's limit: the counts are bounded only in the index's order.
			if strings.Contains(p, "Seq Scan on sendonce_outbox") || strings.Contains(p, "sendonce_outbox_pkey") ||
				strings.Contains(p, "Bitmap Heap Scan on sendonce_outbox") ||
				!strings.Contains(p, "sendonce_outbox_tenant_due_idx") {
				t.Errorf("%s (guarded %v) does not read the outbox through the due index only:\n%s", s.name, guarded, p)
			}
		}
	}
}
