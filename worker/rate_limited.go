package worker

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// metaRateLimited is the key, in a send job's metadata, of its intent's
// 429s in a row: it survives the job's snoozes, so the backoff grows from
// one try to the next on whichever worker runs it.
const metaRateLimited = "sendonce_rate_limited"

// rateLimitedBefore is the intent's 429s in a row before this try, from
// its job's metadata (0: none, or unreadable).
func rateLimitedBefore(job *rivertype.JobRow) int {
	if job == nil || len(job.Metadata) == 0 {
		return 0
	}
	var m struct {
		N int `json:"sendonce_rate_limited"`
	}
	if json.Unmarshal(job.Metadata, &m) != nil {
		return 0
	}
	return max(m.N, 0)
}

// setRateLimited records the intent's 429s in a row in its job's metadata,
// written when the try ends (a snooze or a retry). Outside a River job (a
// test's direct call) there is nowhere to keep it, and the next try starts
// the count again.
func (w *sendWorker) setRateLimited(ctx context.Context, n int) {
	if err := river.MetadataSet(ctx, metaRateLimited, n); err != nil {
		w.cfg.Logger.Debug("cannot record the 429s in a row in the job's metadata", "error", err)
	}
}

// rateLimitWait is how long the job of an attempt whose last answer was a
// 429 is snoozed. A 429 that was a fleet signal waits for the fleet's
// budget (which its Retry-After paused, for MaxPause at most); any other
// is the intent's own trouble and the intent backs off on its own
// (rateLimitBackoff), honouring its Retry-After. Either way the job comes
// back within MaxPause, so a year-long Retry-After (issue 22), or a pause
// cleared by hand, leaves no job a year away, and a 429 never parks.
func (a *attempt) rateLimitWait(retryAfter time.Duration) time.Duration {
	cfg := a.w.cfg
	wait := a.budgetRetryIn
	switch {
	case a.w.budget == nil && retryAfter > 0:
		wait = retryAfter
	case a.w.budget == nil:
		wait = cfg.RateLimitWait
	case !a.fleetSignal:
		wait = rateLimitBackoff(a.rateLimited, retryAfter, cfg.RetryBase, cfg.RateLimitWait, rand.Float64())
	}
	return min(max(wait, time.Second), cfg.MaxPause)
}

// rateLimitBackoff is an intent's own wait after its n-th 429 in a row
// (n ≥ 1) that was not a fleet signal: base·2^(n-1), at most limit, of
// which the upper half is jittered by r in [0, 1) (so intents refused
// together do not come back together), and at least the 429's Retry-After
// (the caller bounds it by MaxPause).
func rateLimitBackoff(n int, retryAfter, base, limit time.Duration, r float64) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	d = d/2 + time.Duration(r*float64(d/2))
	return max(d, retryAfter)
}
