package sendstate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/planguard"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// Issue 26, item 5: the statements that find rows by state keep a plan
// that reads only the rows in that state when the statistics are stale:
// taken while every row was pending (a billing run enqueued), then the run
// sent and no ANALYZE since (autovacuum off, as on a busy server it lags).
// With those statistics the planner believes the partial indexes of
// unsettled rows hold the whole table; a read of the whole table would
// grow with history.
func TestStatePlansSurviveStaleStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t)
	pgtest.Exec(t, pool, `ALTER TABLE sendonce_outbox SET (autovacuum_enabled = false)`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key) VALUES ('r')`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, payload, job_id, run_key)
		SELECT 'p:' || g, '{"from":"a@example.com","to":["b@example.com"],"subject":"s","text":"t"}', g, CASE WHEN g % 2 = 0 THEN 'r' END
		FROM generate_series(1, 50000) g`)
	pgtest.Exec(t, pool, `ANALYZE sendonce_outbox`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'sent', sent_at = now() - interval '2 days', updated_at = now() - interval '2 days'`)
	// The reads GuardStatePlan runs: under stale statistics the first two
	// were a Seq Scan on sendonce_outbox without it.
	guarded := map[string]bool{"oldest pending": true, "due": true}
	for name, q := range map[string]string{
		"oldest pending": `SELECT min(greatest(created_at, coalesce(send_at, created_at))) FROM sendonce_outbox WHERE state IN ('pending', 'sending') AND coalesce(send_at, created_at) <= now()`,
		"due":            `SELECT count(*) FILTER (WHERE send_at IS NULL OR send_at <= now()) FROM sendonce_outbox WHERE state = 'pending'`,
		"in flight":      `SELECT claimed_by, count(*) FROM sendonce_outbox WHERE state = 'sending' AND claimed_by IS NOT NULL GROUP BY 1`,
		"sweep":          `SELECT id FROM sendonce_outbox WHERE job_id IS NULL AND state = 'pending' ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED`,
		"rescue":         `SELECT o.id FROM sendonce_outbox o WHERE o.state = 'sending' AND o.claimed_by IS NOT NULL AND o.batch_key IS NULL ORDER BY o.id LIMIT 1000`,
		"busy run":       `SELECT 1 FROM sendonce_outbox m WHERE m.run_key = 'r' AND m.run_key IS NOT NULL AND m.state IN ('pending', 'sending')`,
		"failures":       `SELECT count(*) FROM sendonce_outbox WHERE state = 'failed' AND updated_at > now() - interval '1 day'`,
		// Reconcile's window and its reschedule, unguarded: with the state a
		// constant, the window walked the primary key over all history.
		"reconcile window": `WITH w AS MATERIALIZED (
				SELECT state, id, job_id FROM sendonce_outbox
				WHERE state IN ('pending', 'sending') AND (state, id) > ('', 0) ORDER BY state, id LIMIT 5000)
			SELECT w.state, w.id, w.job_id IS NOT NULL AND (j.state IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))
			FROM w LEFT JOIN LATERAL (SELECT j.state FROM river_job j WHERE j.id = w.job_id LIMIT 1) j ON true`,
		"reconcile jobs": `SELECT o.id FROM sendonce_outbox o
			LEFT JOIN LATERAL (SELECT j.state FROM river_job j WHERE j.id = o.job_id LIMIT 1) j ON true
			WHERE o.id = ANY('{1,2,3,40000}') AND o.state IN ('pending', 'sending') AND o.job_id IS NOT NULL AND o.batch_key IS NULL
				AND (j.state IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))
			ORDER BY o.id LIMIT 1000 FOR UPDATE OF o SKIP LOCKED`,
	} {
		var plan []string
		err := planguard.Run(ctx, pool, func(tx pgx.Tx) error {
			if !guarded[name] {
				if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = on`); err != nil {
					return err
				}
			}
			rows, err := tx.Query(ctx, "EXPLAIN "+q)
			if err != nil {
				return err
			}
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// The primary key reads the whole table but for lookups of ids.
		p := strings.Join(plan, "\n")
		if strings.Contains(p, "Seq Scan on sendonce_outbox") || strings.Contains(p, "sendonce_outbox_pkey") && !strings.Contains(p, "Index Cond: (id = ") {
			t.Errorf("%s reads the whole outbox under stale statistics:\n%s", name, p)
		}
	}
}
