package sendstate_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// insertTenant inserts n due intents of tenant ("" the default tenant),
// of run when run is not "".
func insertTenant(t *testing.T, pool *pgxpool.Pool, tenant, run string, n int) {
	t.Helper()
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, tenant, run_key)
		SELECT 'fair:' || coalesce(nullif($2, ''), 'default') || ':' || coalesce(nullif($3, ''), 'tx') || ':' || g, 'email', $1, nullif($2, ''), nullif($3, '')
		FROM generate_series(1, $4::int) g`, outboxtest.InvoiceBody, tenant, run, n)
}

func claimShares(t *testing.T, pool *pgxpool.Pool, shares ...sendstate.Share) map[string]int {
	t.Helper()
	claimed, err := sendstate.ClaimShares(context.Background(), pool, shares, claimOpts)
	if err != nil {
		t.Fatalf("ClaimShares(%v): %v", shares, err)
	}
	got := map[string]int{}
	for _, c := range claimed {
		class := "tx"
		if c.RunKey != "" {
			class = "bulk"
		}
		got[class+":"+c.Tenant]++
	}
	return got
}

// A fair claim takes each share's intents of its own tenant and class
// only, as many as asked and no more than are due; DueTenants lists each
// tenant with intents pending once per class, transactional first, with
// its weight from sendonce_tenant.
func TestClaimSharesTakesEachTenantsOwn(t *testing.T) {
	t.Parallel()
	pool, _, _ := setup(t)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key, tenant) VALUES ('digest', 'acme')`)
	insertTenant(t, pool, "acme", "digest", 5)
	insertTenant(t, pool, "acme", "", 2)
	insertTenant(t, pool, "beta", "", 3)
	insertTenant(t, pool, "", "", 1)
	insertSQL(t, pool, "later", "send_at", time.Now().Add(time.Hour))
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, weight) VALUES ('beta', 3)`)

	ts, err := sendstate.DueTenants(context.Background(), pool, "", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, d := range ts {
		seen = append(seen, fmt.Sprintf("%v/%s/due=%v/w=%d", d.Bulk, d.Tenant, d.Due, d.Weight))
		if d.Allow != math.MaxInt32 {
			t.Errorf("%s: allow %d, want no limit", d.Tenant, d.Allow)
		}
	}
	want := []string{"false//due=true/w=1", "false/acme/due=true/w=1", "false/beta/due=true/w=3", "true/acme/due=true/w=1"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("DueTenants: %v, want %v", seen, want)
	}

	got := claimShares(t, pool, sendstate.Share{Tenant: "beta", N: 2}, sendstate.Share{Tenant: "acme", N: 5},
		sendstate.Share{Bulk: true, Tenant: "acme", N: 1})
	if fmt.Sprint(got) != fmt.Sprint(map[string]int{"tx:beta": 2, "tx:acme": 2, "bulk:acme": 1}) {
		t.Fatalf("claimed %v, want 2 of beta's, acme's 2 transactional (all it has) and 1 of its run", got)
	}
	got = claimShares(t, pool, sendstate.Share{Tenant: "", N: 3})
	if fmt.Sprint(got) != fmt.Sprint(map[string]int{"tx:": 1}) {
		t.Fatalf("claimed %v, want the default tenant's one due intent (the other is not due)", got)
	}
}

// A tenant's rate and quota hold its claims across every claimer: with a
// rate of 2 a second, a second's worth (2) is taken at once and the
// next token comes half a second later; a daily quota of 3 stops the
// tenant at 3 first attempts that day, and DueTenants says how long it
// waits. Another tenant is not held.
func TestClaimSharesKeepsTenantLimits(t *testing.T) {
	t.Parallel()
	pool, _, _ := setup(t)
	insertTenant(t, pool, "slow", "", 10)
	insertTenant(t, pool, "capped", "", 10)
	insertTenant(t, pool, "free", "", 10)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, rate) VALUES ('slow', 2)`)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, quota_day) VALUES ('capped', 3)`)

	got := claimShares(t, pool, sendstate.Share{Tenant: "slow", N: 5}, sendstate.Share{Tenant: "capped", N: 2},
		sendstate.Share{Tenant: "free", N: 5})
	if fmt.Sprint(got) != fmt.Sprint(map[string]int{"tx:slow": 2, "tx:capped": 2, "tx:free": 5}) {
		t.Fatalf("claimed %v, want slow's 2 tokens, capped's 2, free's 5", got)
	}
	got = claimShares(t, pool, sendstate.Share{Tenant: "slow", N: 5}, sendstate.Share{Tenant: "capped", N: 5})
	if got["tx:slow"] > 1 || got["tx:capped"] != 1 {
		t.Fatalf("claimed %v, want at most 1 of slow's (a token per half second) and capped's last 1 of its quota", got)
	}
	ts, err := sendstate.DueTenants(context.Background(), pool, "", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]sendstate.DueTenant{}
	for _, d := range ts {
		byName[d.Tenant] = d
	}
	if c := byName["capped"]; c.Allow != 0 || c.Wait < time.Second || c.Wait > 24*time.Hour {
		t.Fatalf("capped: allow %d, wait %s; want 0 until the next UTC day", c.Allow, c.Wait)
	}
	if s := byName["slow"]; s.Allow > 1 || (s.Allow == 0 && (s.Wait <= 0 || s.Wait > 500*time.Millisecond)) {
		t.Fatalf("slow: allow %d, wait %s; want at most 1, or a wait of half a second at most", s.Allow, s.Wait)
	}
	var dayCount int
	if err := pool.QueryRow(context.Background(), `SELECT day_count FROM sendonce_tenant WHERE name = 'capped'`).Scan(&dayCount); err != nil {
		t.Fatal(err)
	}
	if dayCount != 3 {
		t.Fatalf("capped's day_count %d, want 3", dayCount)
	}
	got = claimShares(t, pool, sendstate.Share{Tenant: "capped", N: 5}, sendstate.Share{Tenant: "free", N: 5})
	if got["tx:capped"] != 0 || got["tx:free"] != 5 {
		t.Fatalf("claimed %v, want none of capped's (its quota is spent) and free's 5", got)
	}
}

// Claims of many tenants keep their generic plan: the shares are padded
// to a size with a text of its own, so the planner knows their number.
func TestClaimSharesKeepsItsPlan(t *testing.T) {
	t.Parallel()
	// The statistics the planner has may be of another shape than the
	// intents claimed: of one large tenant's (a broadcast drained before
	// the tenants came), or of many small ones.
	for _, tc := range []struct {
		name     string
		analyzed func(t *testing.T, pool *pgxpool.Pool)
	}{
		{"many tenants", func(t *testing.T, pool *pgxpool.Pool) {
			for i := range 30 {
				insertTenant(t, pool, fmt.Sprintf("t%02d", i), "", 5)
			}
		}},
		{"one large tenant", func(t *testing.T, pool *pgxpool.Pool) {
			insertTenant(t, pool, "", "", 3000)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, _, _ := setup(t)
			ctx := context.Background()
			tc.analyzed(t, pool)
			pgtest.Exec(t, pool, `ANALYZE sendonce_outbox`)
			for i := range 30 {
				insertTenant(t, pool, fmt.Sprintf("u%02d", i), "", 5)
			}
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			const claims = 20
			for i := range claims {
				var shares []sendstate.Share
				for j := range 3 {
					shares = append(shares, sendstate.Share{Tenant: fmt.Sprintf("u%02d", (i*3+j)%30), N: 1})
				}
				sort.Slice(shares, func(a, b int) bool { return shares[a].Tenant < shares[b].Tenant })
				if _, err := sendstate.ClaimShares(ctx, conn, shares, claimOpts); err != nil {
					t.Fatalf("claim %d: %v", i, err)
				}
			}
			var generic, custom int64
			if err := conn.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements
				WHERE statement LIKE '%claimed_tenant%'`).Scan(&generic, &custom); err != nil {
				t.Fatal(err)
			}
			if generic < claims-5 || custom > 5 {
				t.Fatalf("%d claims: %d custom plans and %d generic; want at most the first 5 planned for their arguments", claims, custom, generic)
			}
		})
	}
}

// A claim given back unattempted (UnclaimDrained: an intent claimed
// ahead that no slot took) gives back what it spent of its tenant's
// limits: claimed again, it counts once against the daily quota, not
// twice, and the token of the rate it took is there for the next claim.
func TestUnclaimDrainedGivesTheTenantsLimitsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t)
	insertTenant(t, pool, "capped", "", 3)
	insertTenant(t, pool, "slow", "", 3)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, quota_day, rate) VALUES ('capped', 2, NULL), ('slow', NULL, 0.01)`)
	unclaimAll := func() {
		t.Helper()
		rows, _ := pool.Query(ctx, `UPDATE sendonce_outbox SET claimed_by = 7 WHERE state = 'sending' RETURNING idempotency_key`)
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if n, err := sendstate.UnclaimDrained(ctx, pool, keys, 7); err != nil || n != len(keys) {
			t.Fatalf("UnclaimDrained = %d, %v; want %d", n, err, len(keys))
		}
	}

	if got := claimShares(t, pool, sendstate.Share{Tenant: "capped", N: 1}, sendstate.Share{Tenant: "slow", N: 1}); got["tx:capped"] != 1 || got["tx:slow"] != 1 {
		t.Fatalf("claimed %v, want one of each", got)
	}
	unclaimAll()
	var dayCount int
	var tokens float64
	if err := pool.QueryRow(ctx, `SELECT (SELECT day_count FROM sendonce_tenant WHERE name = 'capped'),
		(SELECT tokens FROM sendonce_tenant WHERE name = 'slow')`).Scan(&dayCount, &tokens); err != nil {
		t.Fatal(err)
	}
	if dayCount != 0 || tokens < 1 {
		t.Fatalf("after the unclaim: capped's day_count %d, slow's tokens %.2f; want 0 and its token back (1)", dayCount, tokens)
	}
	got := claimShares(t, pool, sendstate.Share{Tenant: "capped", N: 5}, sendstate.Share{Tenant: "slow", N: 5})
	if got["tx:capped"] != 2 || got["tx:slow"] != 1 {
		t.Fatalf("claimed %v after the unclaim, want capped's 2 of its quota (the one given back among them) and slow's 1 token", got)
	}
	if err := pool.QueryRow(ctx, `SELECT day_count FROM sendonce_tenant WHERE name = 'capped'`).Scan(&dayCount); err != nil {
		t.Fatal(err)
	}
	if dayCount != 2 {
		t.Fatalf("capped's day_count %d after 2 distinct first claims, want 2", dayCount)
	}
	// A claim given back that was not its intent's first (a retry) gave
	// nothing to the quota when it was made, and takes nothing back.
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET attempts = 2 WHERE tenant = 'capped' AND state = 'sending'`)
	unclaimAll()
	if err := pool.QueryRow(ctx, `SELECT day_count FROM sendonce_tenant WHERE name = 'capped'`).Scan(&dayCount); err != nil {
		t.Fatal(err)
	}
	if dayCount != 2 {
		t.Fatalf("capped's day_count %d after retries were given back, want 2 still", dayCount)
	}
}

// The look at the tenants keeps its generic plan on a connection, with
// and without the coalescer's hold: planned anew at every call, it cost
// a millisecond of planning against a fraction of one to run.
func TestDueTenantsKeepsItsPlan(t *testing.T) {
	t.Parallel()
	pool, _, _ := setup(t)
	ctx := context.Background()
	for i := range 30 {
		insertTenant(t, pool, fmt.Sprintf("t%02d", i), "", 5)
	}
	pgtest.Exec(t, pool, `ANALYZE sendonce_outbox`)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	const looks = 20
	for _, hold := range []time.Duration{0, time.Second} {
		for i := range looks {
			ts, err := sendstate.DueTenants(ctx, conn, "", hold, i%2 == 0)
			if err != nil || len(ts) != 30 {
				t.Fatalf("look %d (hold %s): %d tenants, %v; want 30", i, hold, len(ts), err)
			}
		}
	}
	var generic, custom int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements
		WHERE statement LIKE '%WITH RECURSIVE ts AS%'`).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	// Three texts: a claim's look (the hold does not matter to it), the
	// drain's with and without the hold.
	if custom > 3*5 || generic < 2*looks-3*5 {
		t.Fatalf("%d looks: %d custom plans and %d generic; want at most the first 5 of each text planned for their arguments", 2*looks, custom, generic)
	}
}

// A claim made before its tenant had a quota was not counted against it,
// and giving it back takes nothing from the count: else one more intent
// than the quota would go (TestSystem, rule 14, seed 1510: 15 first
// claims against a daily quota of 14 set while a claim ahead waited).
func TestUnclaimOfAClaimBeforeTheQuotaGivesNothingBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t)
	insertTenant(t, pool, "late", "", 5)
	before, err := sendstate.ClaimShares(ctx, pool, []sendstate.Share{{Tenant: "late", N: 1}}, claimOpts)
	if err != nil || len(before) != 1 {
		t.Fatalf("claimed %d, %v; want 1", len(before), err)
	}
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, quota_day) VALUES ('late', 2)`)
	if got := claimShares(t, pool, sendstate.Share{Tenant: "late", N: 1}); got["tx:late"] != 1 {
		t.Fatalf("claimed %v, want 1 of late's, counted", got)
	}
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET claimed_by = 7 WHERE idempotency_key = $1`, before[0].Record.Key)
	if n, err := sendstate.UnclaimDrained(ctx, pool, []string{before[0].Record.Key}, 7); err != nil || n != 1 {
		t.Fatalf("UnclaimDrained = %d, %v; want 1", n, err)
	}
	var used int
	if err := pool.QueryRow(ctx, `SELECT day_count FROM sendonce_tenant WHERE name = 'late'`).Scan(&used); err != nil {
		t.Fatal(err)
	}
	if used != 1 {
		t.Fatalf("day_count %d after giving back a claim made before the quota, want 1 (the one counted)", used)
	}
	if got := claimShares(t, pool, sendstate.Share{Tenant: "late", N: 5}); got["tx:late"] != 1 {
		t.Fatalf("claimed %v, want 1 more of late's: its quota is 2", got)
	}
}
