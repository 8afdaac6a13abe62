package worker

import (
	"encoding/json"
	"sort"
	"sync"
	"time"
)

// recentClaims counts the intents this worker claimed by tenant over the
// last minute, in buckets of recentBucket, for the share the page and
// `sendonce tenants` show (sendonce_worker.tenants, written with the
// lease's renewal every reportEvery).
type recentClaims struct {
	mu      sync.Mutex
	start   [recentBuckets]int64 // each bucket's start, in recentBucket units since the epoch
	counts  [recentBuckets]map[string]int
	written time.Time // the last report taken
}

const (
	recentBucket  = 10 * time.Second
	recentBuckets = 6 // a minute
	// reportEvery is how often a renewal carries the counts.
	reportEvery = 10 * time.Second
	// reportTenants is how many tenants a report names: those with the
	// most; the rest are summed under "*", which is no tenant's name.
	reportTenants = 100
)

// add counts n intents of tenant claimed at now.
func (r *recentClaims) add(tenant string, n int, now time.Time) {
	b := now.UnixNano() / int64(recentBucket)
	i := int(b % recentBuckets)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start[i] != b || r.counts[i] == nil {
		r.start[i], r.counts[i] = b, map[string]int{}
	}
	r.counts[i][tenant] += n
}

// report returns the counts of the last minute as sendonce_worker.tenants
// holds them, when reportEvery has passed since the last; nil otherwise
// (the renewal leaves the column as it is).
func (r *recentClaims) report(now time.Time) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.written.IsZero() && now.Sub(r.written) < reportEvery {
		return nil
	}
	r.written = now
	b := now.UnixNano() / int64(recentBucket)
	sum := map[string]int{}
	for i := range recentBuckets {
		if r.counts[i] != nil && b-r.start[i] < recentBuckets {
			for t, n := range r.counts[i] {
				sum[t] += n
			}
		}
	}
	if len(sum) > reportTenants {
		names := make([]string, 0, len(sum))
		for t := range sum {
			names = append(names, t)
		}
		sort.Slice(names, func(a, b int) bool {
			if sum[names[a]] != sum[names[b]] {
				return sum[names[a]] > sum[names[b]]
			}
			return names[a] < names[b]
		})
		rest := 0
		for _, t := range names[reportTenants:] {
			rest += sum[t]
			delete(sum, t)
		}
		sum["*"] = rest
	}
	out, _ := json.Marshal(sum) // a map of strings to ints always encodes
	return out
}
