package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

// TestRateHeadersPaceDiscovery drains 1,500 intents with three `sendonce
// work` processes and no --api-rate through an API of 20 requests a second
// that sends its rate-limit headers (RateLimit-Limit, -Remaining, -Reset
// and -Policy, the fake's --rate-headers): the fleet reads the API's rate
// from them and paces before a 429 rather than after (issue 23, item 4).
// It must use at least 90% of the budget with at most 1% of its requests
// refused.
func TestRateHeadersPaceDiscovery(t *testing.T) {
	setup(t)
	start := time.Now()
	rng := rngFor("rate-headers")
	n := 1500 * suite.scale
	const limit = 20.0
	srv := fakeapi.NewTest(t, fakeapi.Config{APIKeys: []string{apiKey}, Seed: seedFor("rate-headers"),
		Rate: []fakeapi.RateLimit{{Count: int(limit), Per: time.Second}}, RateHeaders: true})
	intents := makeIntents(rng, fmt.Sprintf("rate-headers-%d", suite.seed), n)
	f := drainRateLimited(t, srv, "rateheaders", intents, workerOptions{Concurrency: 10, Defaults: true}, 5*time.Minute*time.Duration(suite.scale), limit)
	l, reqs, refused, span, use, share := f.ledger, f.reqs, f.refused, f.span, f.use, f.share
	summary(t, "rate-headers: seed=%d intents=%d workers=3 api_rate=\"\" limit=20/s rate_headers=true requests=%d refused_429=%d (%.2f%%) budget_used=%.0f%% span=%.1fs deliveries=%d duplicates=%d lost=%d elapsed=%s",
		suite.seed, n, len(reqs), refused, 100*share, 100*use, span,
		l.Deliveries, l.Duplicates, l.Lost, time.Since(start).Round(time.Second))
	if use < 0.90 {
		t.Errorf("budget used %.0f%%, want at least 90%%", 100*use)
	}
	if share > 0.01 {
		t.Errorf("%d of %d requests (%.2f%%) refused with 429, want at most 1%%", refused, len(reqs), 100*share)
	}
}
