// Package shares measures how tenants share what a fake API delivered,
// for the integration test and the benchmark of fair shares among tenants
// (issue 46). Their keys name the tenant first ("a:17" is tenant a's);
// deliveries are counted by tenant in windows of the fake's delivery
// times; a tenant's transactional intents are timed from their commit to
// their delivery; and a tenant's daily quota counts the database's UTC
// day, which Day reads.
package shares

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/outbox"
)

// Tenant is the tenant a key names: its part before the first ":".
func Tenant(key string) string {
	tenant, _, _ := strings.Cut(key, ":")
	return tenant
}

// Windows counts the deliveries by tenant in each of n windows of width
// from t0; a delivery before t0 or after the last window is left out.
func Windows(deliveries []fakeapi.Delivery, t0 time.Time, width time.Duration, n int) []map[string]int {
	windows := make([]map[string]int, n)
	for i := range windows {
		windows[i] = map[string]int{}
	}
	for _, d := range deliveries {
		if d.DeliveredAt.Before(t0) {
			continue
		}
		if i := int(d.DeliveredAt.Sub(t0) / width); i < n {
			windows[i][Tenant(d.IdempotencyKey)]++
		}
	}
	return windows
}

// Of is each of tenants' share of their deliveries in window w, as a
// fraction (all 0 when none of them was delivered), and the deliveries
// they had.
func Of(w map[string]int, tenants ...string) (shares []float64, of int) {
	for _, t := range tenants {
		of += w[t]
	}
	shares = make([]float64, len(tenants))
	for i, t := range tenants {
		if of > 0 {
			shares[i] = float64(w[t]) / float64(of)
		}
	}
	return shares, of
}

// Text renders each of tenants' count and share of their deliveries in
// window w: "a 61, b 60, c 61 (a 33.5%, b 33.0%, c 33.5%)".
func Text(w map[string]int, tenants ...string) string {
	shares, _ := Of(w, tenants...)
	counts, pcts := make([]string, len(tenants)), make([]string, len(tenants))
	for i, t := range tenants {
		counts[i] = fmt.Sprintf("%s %d", t, w[t])
		pcts[i] = fmt.Sprintf("%s %.1f%%", t, 100*shares[i])
	}
	return strings.Join(counts, ", ") + " (" + strings.Join(pcts, ", ") + ")"
}

// WaitDeliveredAfter waits for srv's first delivery at or after at, so
// that every window before it is complete.
func WaitDeliveredAfter(ctx context.Context, srv *fakeapi.Server, at time.Time) error {
	for {
		ds := srv.Deliveries()
		if n := len(ds); n > 0 && !ds[n-1].DeliveredAt.Before(at) {
			return nil
		}
		if err := srv.WaitDeliveries(ctx, len(ds)+1); err != nil {
			return fmt.Errorf("waiting for a delivery after %s (%d so far): %w", at.Format(time.TimeOnly), len(ds), err)
		}
	}
}

// Duplicates are the keys delivered more than once.
func Duplicates(deliveries []fakeapi.Delivery) []string {
	seen := map[string]int{}
	var dup []string
	for _, d := range deliveries {
		if seen[d.IdempotencyKey]++; seen[d.IdempotencyKey] == 2 {
			dup = append(dup, d.IdempotencyKey)
		}
	}
	return dup
}

// Day is the database's current UTC day, the one tenants' daily quotas
// count.
func Day(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	var day time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('day', now(), 'UTC')`).Scan(&day); err != nil {
		return day, fmt.Errorf("the database's day: %w", err)
	}
	return day.UTC(), nil
}

// Urgent times transactional intents from their commit to their
// delivery: Enqueue commits them, Latencies reads the fake's deliveries.
type Urgent struct {
	mu        sync.Mutex
	committed map[string]time.Time // when each transaction began
}

// Enqueue commits intents through ob, one a transaction, one every every
// (the first at once), and notes when each transaction began: the
// latency includes the commit.
func (u *Urgent) Enqueue(ctx context.Context, pool *pgxpool.Pool, ob *outbox.Outbox, intents []outbox.Intent, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i, in := range intents {
		at := time.Now()
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, in)
			return err
		}); err != nil {
			return fmt.Errorf("intent %d: %w", i, err)
		}
		u.mu.Lock()
		if u.committed == nil {
			u.committed = map[string]time.Time{}
		}
		u.committed[in.Key] = at
		u.mu.Unlock()
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Latencies are the times from commit to delivery of the intents
// committed that were delivered, sorted, and how many were not.
func (u *Urgent) Latencies(deliveries []fakeapi.Delivery) (sorted []time.Duration, missing int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delivered := map[string]time.Time{}
	for _, d := range deliveries {
		if _, ok := u.committed[d.IdempotencyKey]; ok {
			delivered[d.IdempotencyKey] = d.DeliveredAt
		}
	}
	for key, at := range u.committed {
		if d, ok := delivered[key]; ok {
			sorted = append(sorted, d.Sub(at))
		} else {
			missing++
		}
	}
	slices.Sort(sorted)
	return sorted, missing
}
