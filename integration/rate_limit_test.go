package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

// TestRateLimitedDrain drains intents with three `sendonce work` processes
// through an API that allows 20 requests a second per key (429 with no
// Retry-After beyond that, as the SDK pages say), once with --api-rate 20/s
// and once with no rate given, so the fleet finds the limit from 429s.
// Every intent must be sent exactly once and none parked failed; the
// summary line says how much of the budget became deliveries and how many
// requests were refused (make bench measures the same at a larger size).
func TestRateLimitedDrain(t *testing.T) {
	setup(t)
	for _, tc := range []struct{ name, apiRate string }{{"configured", "20/s"}, {"discovered", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			rng := rngFor("rate-limit-" + tc.name)
			n := 150 * suite.scale
			const limit = 20.0
			srv := fakeapi.NewTest(t, fakeapi.Config{APIKeys: []string{apiKey}, Seed: seedFor("rate-limit-" + tc.name),
				Rate: []fakeapi.RateLimit{{Count: int(limit), Per: time.Second}}})
			intents := makeIntents(rng, fmt.Sprintf("rate-%s-%d", tc.name, suite.seed), n)
			opts := workerOptions{Concurrency: 10, APIRate: tc.apiRate, Defaults: true}
			f := drainRateLimited(t, srv, "rate", intents, opts, 3*time.Minute*time.Duration(suite.scale), limit)
			l, reqs, refused, span, use, share := f.ledger, f.reqs, f.refused, f.span, f.use, f.share
			// A fleet that ignored the limit had 98.5% of its requests refused;
			// this bound catches a budget that does nothing, not a slow one.
			if share > 0.25 {
				t.Errorf("%d of %d requests (%.1f%%) refused with 429: the fleet is not pacing itself", refused, len(reqs), 100*share)
			}
			summary(t, "rate-limit-%s: seed=%d intents=%d workers=3 api_rate=%q limit=20/s requests=%d refused_429=%d (%.1f%%) budget_used=%.0f%% span=%.1fs deliveries=%d duplicates=%d lost=%d failed=0 elapsed=%s",
				tc.name, suite.seed, n, tc.apiRate, len(reqs), refused, 100*share, 100*use, span,
				l.Deliveries, l.Duplicates, l.Lost, time.Since(start).Round(time.Second))
		})
	}
}
