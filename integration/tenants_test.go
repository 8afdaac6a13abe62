package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/internal/testkit/shares"
	"github.com/sendonce/sendonce/outbox"
)

// tenantWindow is the length of the windows the shares are counted in.
const tenantWindow = 10 * time.Second

// TestTenantsShareTheFleetsBudget is issue 46's "done when", at the size
// of the suite: three `sendonce work --api-rate 20/s` processes drain,
// through an API that allows 20 requests a second, the runs of tenants a
// (10,000 members), b and c (1,000 each), all backlogged throughout, and
// q (300 members, a daily quota of 100), while a transactional intent of
// tenant d is committed every half second (50 of them).
//
// From the first delivery, in windows of 10 s by the fake's delivery
// times: at weights 1:1:1, each of a, b and c has a third of the three's
// deliveries (± 5 points) in each of the first three windows; then a is
// given weight 2 (the workers read it within a second, so the window it
// falls in is skipped) and has half (± 5 points) in each of the next two.
// The shares are counted among a, b and c alone: q's and d's deliveries
// take their own part of the budget beside them. Each of d's intents is
// delivered within 1 s of its commit (the p99 of 50, which is their
// slowest); q stops at exactly 100 deliveries, the rest of its run left
// unattempted, while the others go on; nothing is delivered twice.
//
// q's quota counts a UTC day by the database's clock: should the test
// cross midnight there, q may have been sent up to 100 more on the new
// day, which the test tolerates and says.
func TestTenantsShareTheFleetsBudget(t *testing.T) {
	setup(t)
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const (
		limit     = 20
		quota     = 100
		nTx       = 50
		txEvery   = 500 * time.Millisecond
		even      = 3 // windows at 1:1:1, from the first delivery
		skipped   = 1 // the window the weight changes in
		weighted  = 2 // windows at 2:1:1 after it
		tolerance = 0.05
	)
	backlog := map[string]int{"a": 10_000, "b": 1_000, "c": 1_000, "q": 300}
	srv := fakeapi.NewTest(t, fakeapi.Config{APIKeys: []string{apiKey}, Seed: seedFor("tenants"),
		Rate: []fakeapi.RateLimit{{Count: limit, Per: time.Second}}})
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "tenants")
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range slices.Sorted(maps.Keys(backlog)) {
		enqueueTenantRun(ctx, t, pool, ob, tenant, backlog[tenant])
	}
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, quota_day) VALUES ('q', $1)
		ON CONFLICT (name) DO UPDATE SET quota_day = excluded.quota_day`, quota)
	dayBefore := day(ctx, t, pool)

	e := processEnv(dbURL, srv)
	workers := make([]*proc, 3)
	for i := range workers {
		workers[i] = startWorker(t, fmt.Sprintf("worker%d", i), e, workerOptions{Concurrency: 10, APIRate: fmt.Sprintf("%d/s", limit), Defaults: true})
	}
	if err := srv.WaitDeliveries(ctx, 1); err != nil {
		t.Fatalf("no delivery: %v", err)
	}
	t0 := srv.Deliveries()[0].DeliveredAt

	// d's transactional intents, committed one every txEvery while the
	// windows go by.
	urgent := make([]outbox.Intent, nTx)
	for i := range urgent {
		urgent[i] = emailIntent(fmt.Sprintf("d:reset:%d", i), fmt.Sprintf("d-%d@example.test", i)).outboxIntent()
		urgent[i].Tenant = "d"
	}
	var tx shares.Urgent
	txDone := make(chan error, 1)
	go func() { txDone <- tx.Enqueue(ctx, pool, ob, urgent, txEvery) }()

	// The windows at 1:1:1, then a at weight 2 (read again by the
	// workers within a second), then the windows at 2:1:1.
	waitDeliveredAfter(ctx, t, srv, t0.Add(even*tenantWindow))
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, weight) VALUES ('a', 2)
		ON CONFLICT (name) DO UPDATE SET weight = excluded.weight`)
	reweighted := time.Now()
	end := t0.Add((even + skipped + weighted) * tenantWindow)
	waitDeliveredAfter(ctx, t, srv, end)
	if err := <-txDone; err != nil {
		t.Fatalf("enqueue d's transactional intents: %v", err)
	}
	var pendingB, pendingC int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant = 'b'), count(*) FILTER (WHERE tenant = 'c')
		FROM sendonce_outbox WHERE state = 'pending'`).Scan(&pendingB, &pendingC); err != nil {
		t.Fatal(err)
	}
	dayAfter := day(ctx, t, pool)
	for _, w := range workers {
		w.stop(t)
	}

	deliveries := srv.Deliveries()
	if dup := shares.Duplicates(deliveries); len(dup) > 0 {
		t.Errorf("%d keys delivered more than once, such as %v", len(dup), dup[:min(len(dup), 5)])
	}
	if pendingB == 0 || pendingC == 0 {
		t.Errorf("b (%d pending) or c (%d pending) ran dry before the last window: the shares were not measured while all three were backlogged",
			pendingB, pendingC)
	}
	if reweighted.Sub(t0) > (even+skipped)*tenantWindow-2*time.Second {
		t.Errorf("a's weight was changed %s after the first delivery, too late in window %d for the workers to read it before the next",
			reweighted.Sub(t0).Round(time.Millisecond), even)
	}

	// The shares, window by window, among a, b and c.
	windows := shares.Windows(deliveries, t0, tenantWindow, even+skipped+weighted)
	abc := []string{"a", "b", "c"}
	var short []string
	for i, w := range windows {
		phase, want := "1:1:1", []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}
		switch {
		case i >= even+skipped:
			phase, want = "2:1:1", []float64{0.5, 0.25, 0.25}
		case i >= even:
			phase, want = "changing (skipped)", nil
		}
		t.Logf("window %d [%2d s, %2d s) %s: %s; q %d, d %d", i, i*10, i*10+10, phase, shares.Text(w, abc...), w["q"], w["d"])
		got, of := shares.Of(w, abc...)
		short = append(short, fmt.Sprintf("%.0f/%.0f/%.0f", 100*got[0], 100*got[1], 100*got[2]))
		if want == nil {
			continue
		}
		if of == 0 {
			t.Errorf("window %d: no delivery of a, b or c", i)
			continue
		}
		for j, tenant := range abc {
			if got[j] < want[j]-tolerance || got[j] > want[j]+tolerance {
				t.Errorf("window %d (%s): tenant %s has %.1f%% of a, b and c's %d deliveries, want %.1f%% ± %.0f points",
					i, phase, tenant, 100*got[j], of, 100*want[j], 100*tolerance)
			}
		}
	}

	// d: each delivered within a second of its commit.
	lat, missing := tx.Latencies(deliveries)
	if missing > 0 {
		t.Errorf("%d of d's %d transactional intents not delivered by the end of the last window", missing, nTx)
	}
	p50, p99 := nearestRank(lat, 50), nearestRank(lat, 99)
	t.Logf("d: %d transactional intents, commit → delivered p50 %s, p99 %s, max %s",
		len(lat), p50.Round(time.Millisecond), p99.Round(time.Millisecond), nearestRank(lat, 100).Round(time.Millisecond))
	if p99 >= time.Second {
		t.Errorf("d's transactional intents: p99 %s from commit to delivery, want under 1 s (all: %v)", p99.Round(time.Millisecond), roundAll(lat))
	}

	// q: its quota, while the others went on.
	qSent, lastQ, afterQ := 0, time.Time{}, 0
	for _, d := range deliveries {
		if shares.Tenant(d.IdempotencyKey) == "q" {
			qSent++
			lastQ = d.DeliveredAt
		}
	}
	for _, d := range deliveries {
		if tenant := shares.Tenant(d.IdempotencyKey); d.DeliveredAt.After(lastQ) && tenant != "q" && tenant != "d" {
			afterQ++
		}
	}
	var qUnattempted, qCounted int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'pending' AND attempts = 0),
		(SELECT coalesce(max(day_count), 0) FROM sendonce_tenant WHERE name = 'q')
		FROM sendonce_outbox WHERE tenant = 'q'`).Scan(&qUnattempted, &qCounted); err != nil {
		t.Fatal(err)
	}
	quotaLine := fmt.Sprintf("q: %d delivered of %d (quota %d a day), %d never attempted, the day's count %d; %d deliveries of a, b and c after q's last (%s after the first delivery)",
		qSent, backlog["q"], quota, qUnattempted, qCounted, afterQ, lastQ.Sub(t0).Round(time.Millisecond))
	t.Log(quotaLine)
	if dayAfter.Equal(dayBefore) {
		if qSent != quota || qUnattempted != backlog["q"]-quota || qCounted != quota {
			t.Errorf("q: %d delivered, %d never attempted, day's count %d; want exactly %d delivered (its quota), %d never attempted, count %d",
				qSent, qUnattempted, qCounted, quota, backlog["q"]-quota, quota)
		}
	} else {
		// Midnight UTC, by the database's clock, fell within the test:
		// the quota started again at it.
		t.Logf("q: the database's UTC day changed during the test (%s → %s): q's quota counted two days, up to %d deliveries",
			dayBefore.Format(time.DateOnly), dayAfter.Format(time.DateOnly), 2*quota)
		if qSent < quota || qSent > 2*quota || qCounted > quota {
			t.Errorf("q across midnight: %d delivered, the new day's count %d; want %d to %d, and at most %d on the new day", qSent, qCounted, quota, 2*quota, quota)
		}
	}
	if afterQ < limit {
		t.Errorf("only %d deliveries of a, b and c after q's last: the others did not go on when q's quota stopped it", afterQ)
	}

	summary(t, "tenants: seed=%d workers=3 api_rate=%d/s shares=[%s] d_p50=%s d_p99=%s q_delivered=%d/%d deliveries=%d elapsed=%s",
		suite.seed, limit, strings.Join(short, " "), p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		qSent, quota, len(deliveries), time.Since(begin).Round(time.Second))
}

// enqueueTenantRun enqueues a run of n emails of tenant, keyed
// tenant:digest:i, through the Go API, 1,000 members a transaction.
func enqueueTenantRun(ctx context.Context, t testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox, tenant string, n int) {
	t.Helper()
	for from := 0; from < n; from += 1000 {
		ins := make([]outbox.Intent, 0, 1000)
		for i := from; i < min(from+1000, n); i++ {
			ins = append(ins, emailIntent(fmt.Sprintf("%s:digest:%d", tenant, i), fmt.Sprintf("%s-%d@example.test", tenant, i)).outboxIntent())
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "digest-" + tenant, Tenant: tenant, Intents: ins})
			return err
		}); err != nil {
			t.Fatalf("enqueue %s's run: %v", tenant, err)
		}
	}
}

// day is the database's current UTC day (shares.Day).
func day(ctx context.Context, t testing.TB, pool *pgxpool.Pool) time.Time {
	t.Helper()
	d, err := shares.Day(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitDeliveredAfter is shares.WaitDeliveredAfter, failing the test when
// the delivery does not come.
func waitDeliveredAfter(ctx context.Context, t testing.TB, srv *fakeapi.Server, at time.Time) {
	t.Helper()
	if err := shares.WaitDeliveredAfter(ctx, srv, at); err != nil {
		t.Fatal(err)
	}
}

// nearestRank is the p-th percentile of sorted ds by the nearest-rank
// method (of 50 values, the 99th is the largest); 0 for none.
func nearestRank(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100 + 0.999999999)
	return sorted[max(1, min(rank, len(sorted)))-1]
}

// roundAll rounds each to the millisecond, for a failure message.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
