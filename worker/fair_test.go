package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/worker"
)

// fairSetup returns a pool, a fake API and a worker's config paced at
// rate, with 10 slots.
func fairSetup(t *testing.T, rate string) (context.Context, *pgxpool.Pool, *fakeapi.Server, *worker.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	pool, _ := outboxtest.New(t)
	fake := fakeapi.NewTest(t, fakeapi.Config{})
	c, err := client.New(client.WithAPIKey("oe_test_fair00000000000"), client.WithBaseURL(fake.URL()))
	if err != nil {
		t.Fatal(err)
	}
	limits, err := worker.ParseRateLimits(rate)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, pool, fake, &worker.Config{Client: c, Concurrency: 10, RateLimits: limits}
}

// enqueueRunOf inserts a run of tenant with n due members by plain SQL,
// keyed tenant:run:i.
func enqueueRunOf(t *testing.T, pool *pgxpool.Pool, tenant, run string, n int) {
	t.Helper()
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key, tenant) VALUES ($1, $2)`, run, tenant)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, run_key)
		SELECT $2 || ':' || $1 || ':' || g, 'email', $3, $1 FROM generate_series(1, $4::int) g`,
		run, tenant, outboxtest.InvoiceBody, n)
}

// sharesOf counts the first n deliveries by tenant (the key's first part).
func sharesOf(fake *fakeapi.Server, n int) map[string]int {
	got := map[string]int{}
	for i, d := range fake.Deliveries() {
		if i == n {
			break
		}
		got[strings.SplitN(d.IdempotencyKey, ":", 2)[0]]++
	}
	return got
}

// The budget is shared among the tenants with due intents by weight:
// while A (600 members), B and C (200 each) are all backlogged, each has a
// third of the deliveries; with A at weight 2, A has half. A tenant with
// few intents takes them and leaves the rest to the others: with the
// first 300 delivered each of B and C has its 100 at 1:1:1, and A the
// rest.
func TestDrainSharesAmongTenantsByWeight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		weightA int
		want    map[string]int // of the first 300
	}{
		{"1:1:1", 1, map[string]int{"a": 100, "b": 100, "c": 100}},
		{"2:1:1", 2, map[string]int{"a": 150, "b": 75, "c": 75}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, pool, fake, cfg := fairSetup(t, "200/s")
			enqueueRunOf(t, pool, "a", "digest-a", 600)
			enqueueRunOf(t, pool, "b", "digest-b", 200)
			enqueueRunOf(t, pool, "c", "digest-c", 200)
			pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, weight) VALUES ('a', $1)`, tc.weightA)
			start(t, pool, cfg)
			if err := fake.WaitDeliveries(ctx, 300); err != nil {
				t.Fatal(err)
			}
			got := sharesOf(fake, 300)
			for tenant, want := range tc.want {
				if d := got[tenant] - want; d < -15 || d > 15 {
					t.Errorf("tenant %s: %d of the first 300 deliveries, want %d ± 15 (5 points); all: %v", tenant, got[tenant], want, got)
				}
			}
			if err := fake.WaitDeliveries(ctx, 1000); err != nil {
				t.Fatal(err)
			}
			if n := len(fake.Deliveries()); n != 1000 {
				t.Fatalf("%d deliveries of 1,000 intents, want one each", n)
			}
		})
	}
}

// A transactional intent goes before every tenant's bulk mail, whichever
// tenant it is of: one of a fourth tenant, committed while three
// tenants' runs are backlogged, is delivered within a second.
func TestDrainSendsAnotherTenantsTransactionalFirst(t *testing.T) {
	t.Parallel()
	ctx, pool, fake, cfg := fairSetup(t, "50/s")
	enqueueRunOf(t, pool, "a", "digest-a", 300)
	enqueueRunOf(t, pool, "b", "digest-b", 300)
	start(t, pool, cfg)
	if err := fake.WaitDeliveries(ctx, 20); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		committed := time.Now()
		key := fmt.Sprintf("d:reset:%d", i)
		pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, tenant) VALUES ($1, 'email', $2, 'd')`,
			key, outboxtest.InvoiceBody)
		for {
			if d := deliveredKey(fake, key); d != nil {
				if lat := d.DeliveredAt.Sub(committed); lat > time.Second {
					t.Fatalf("%s delivered %s after its commit, want within a second", key, lat)
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s not delivered", key)
			}
			_ = fake.WaitDeliveries(ctx, len(fake.Deliveries())+1)
		}
	}
}

// deliveredKey is the fake's delivery of key, or nil.
func deliveredKey(fake *fakeapi.Server, key string) *fakeapi.Delivery {
	for _, d := range fake.Deliveries() {
		if d.IdempotencyKey == key {
			return &d
		}
	}
	return nil
}

// A tenant's own limits hold it while the others go on: a tenant with a
// daily quota of 20 stops at 20 deliveries with the rest pending, and one
// with a rate of 10 a second is sent no faster, while a tenant without
// limits is sent at the worker's rate.
func TestDrainHoldsTenantsToTheirLimits(t *testing.T) {
	t.Parallel()
	ctx, pool, fake, cfg := fairSetup(t, "100/s")
	enqueueRunOf(t, pool, "capped", "digest-capped", 50)
	enqueueRunOf(t, pool, "slow", "digest-slow", 30)
	enqueueRunOf(t, pool, "free", "digest-free", 200)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, quota_day, rate) VALUES ('capped', 20, NULL), ('slow', NULL, 10)`)
	began := time.Now()
	start(t, pool, cfg)
	if err := fake.WaitDeliveries(ctx, 250); err != nil {
		t.Fatal(err)
	}
	got := sharesOf(fake, 1000)
	if got["capped"] != 20 || got["slow"] != 30 || got["free"] != 200 {
		t.Fatalf("deliveries by tenant %v, want capped 20 (its quota), slow 30 and free 200", got)
	}
	var firstSlow, lastSlow time.Time
	for _, d := range fake.Deliveries() {
		if strings.HasPrefix(d.IdempotencyKey, "slow:") {
			if firstSlow.IsZero() {
				firstSlow = d.DeliveredAt
			}
			lastSlow = d.DeliveredAt
		}
	}
	// 30 at 10 a second, a second's worth at once: 2 s at least.
	if took := lastSlow.Sub(firstSlow); took < 1800*time.Millisecond {
		t.Fatalf("slow's 30 sent in %s (from %s after the start), want no faster than 10 a second after its first second's 10", took, firstSlow.Sub(began))
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE tenant = 'capped' AND state = 'pending' AND attempts = 0`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != 30 {
		t.Fatalf("capped: %d pending and never attempted, want the 30 past its quota", pending)
	}
}

// Each worker records, with its lease's renewal, what it claimed in the
// last minute by tenant: the share `sendonce tenants` and the page add up.
func TestWorkerReportsItsClaimsByTenant(t *testing.T) {
	t.Parallel()
	ctx, pool, fake, cfg := fairSetup(t, "200/s")
	enqueueRunOf(t, pool, "a", "digest-a", 30)
	enqueueRunOf(t, pool, "b", "digest-b", 10)
	start(t, pool, cfg)
	if err := fake.WaitDeliveries(ctx, 40); err != nil {
		t.Fatal(err)
	}
	// The renewal writes the report every ten seconds: the first one
	// after the claims is awaited by polling the row, which has no event.
	var report string
	for ctx.Err() == nil {
		err := pool.QueryRow(ctx, `SELECT coalesce(tenants::text, '') FROM sendonce_worker WHERE ended_at IS NULL`).Scan(&report)
		if err != nil {
			t.Fatal(err)
		}
		if report == `{"a": 30, "b": 10}` {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sendonce_worker.tenants %q, want {\"a\": 30, \"b\": 10}", report)
}

// A drain of many tenants, each with a few intents, is not stalled by
// claims that come back short: 500 slots asking at once among 1,000
// tenants are more tenants than one claim names (128), and each tenant
// has fewer intents left at its end than the quantum it is asked for. A
// slot left with nothing would read that nothing is due and shut the
// drain's gate until the sweeper's net look, 30 s later (4,250 of 5,000
// delivered, then nothing for 25 s, before the fix).
func TestDrainClaimsForMoreTenantsThanOneClaimNames(t *testing.T) {
	t.Parallel()
	_, pool, fake, cfg := fairSetup(t, "100000/s")
	cfg.Concurrency = 500
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, tenant)
		SELECT 't' || (g % 1000) || ':' || g, 'email', $1, 't' || (g % 1000) FROM generate_series(0, 4999) g`, outboxtest.InvoiceBody)
	// Under the race detector the drain takes some 8 s; a stall lasts
	// until the net look, 30 s.
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()
	began := time.Now()
	start(t, pool, cfg)
	if err := fake.WaitDeliveries(ctx, 5000); err != nil {
		t.Fatalf("%d of 5,000 intents of 1,000 tenants delivered in %s: the drain stalled", len(fake.Deliveries()), time.Since(began).Round(time.Millisecond))
	}
}

// A tenant's limits hold its email intents with coalescing on too: the
// coalescer gathers no intent of a tenant with limits into a batch (a
// batch's claim would take them past its quota), so that each goes alone
// through the fair claim, which keeps them.
func TestCoalescingKeepsTenantLimits(t *testing.T) {
	t.Parallel()
	ctx, pool, fake, cfg := fairSetup(t, "100/s")
	cfg.Coalesce = 20
	pgtest.Exec(t, pool, `INSERT INTO sendonce_tenant (name, quota_day) VALUES ('capped', 20)`)
	enqueueRunOf(t, pool, "capped", "digest-capped", 50)
	enqueueRunOf(t, pool, "free", "digest-free", 50)
	start(t, pool, cfg)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("%s: %v", what, ctx.Err())
			}
			_ = fake.WaitDeliveries(ctx, len(fake.Deliveries())+1)
		}
	}
	waitFor("70 deliveries", func() bool { return len(fake.Deliveries()) >= 70 })
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE tenant = 'capped' AND state = 'pending' AND attempts = 0`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, d := range fake.Deliveries() {
		got[strings.SplitN(d.IdempotencyKey, ":", 2)[0]]++
	}
	if pending != 30 {
		t.Fatalf("capped: %d pending and never attempted, want the 30 past its quota of 20; deliveries by key %v", pending, got)
	}
}
