// Package poison holds the poison intents of the bench's trouble scenario
// and of its integration test (integration.TestPoisonIntents, issue 23):
// intents whose every request the fake API answers 429 with no
// Retry-After, forever, placed among ordinary ones. Both use it, so both
// measure the same thing; it lives here, beside the test kits, because the
// bench is in the command's module and the integration test in the
// library's.
package poison

import (
	"strings"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

// Prefix starts the keys of the poison intents.
const Prefix = "poison:"

// Faults are the fake API's faults in the poison scenario: with poison,
// every request of a key that starts with Prefix is answered 429 with no
// Retry-After, forever; without, none.
func Faults(poison bool) []fakeapi.Fault {
	if !poison {
		return nil
	}
	return []fakeapi.Fault{{Kind: fakeapi.FaultRateLimit, Key: Prefix}}
}

// Among is ordinary (at least 700 intents) with the two poison intents,
// poison(0) and poison(1), placed after its 300th and its 700th.
func Among[T any](ordinary []T, poison func(i int) T) []T {
	out := make([]T, 0, len(ordinary)+2)
	out = append(out, ordinary[:300]...)
	out = append(out, poison(0))
	out = append(out, ordinary[300:700]...)
	out = append(out, poison(1))
	return append(out, ordinary[700:]...)
}

// DrainSpan is how long the requests took to drain the intents whose keys
// do not start with except: from the first such request's arrival to the
// last successful answer. skipped counts the requests left out (the poison
// intents' tries).
func DrainSpan(reqs []fakeapi.RequestRecord, except string) (span time.Duration, skipped int) {
	var first, last time.Time
	for _, r := range reqs {
		if strings.HasPrefix(r.IdempotencyKey, except) {
			skipped++
			continue
		}
		if first.IsZero() || r.ReceivedAt.Before(first) {
			first = r.ReceivedAt
		}
		if r.Status < 300 && r.AnsweredAt.After(last) {
			last = r.AnsweredAt
		}
	}
	return last.Sub(first), skipped
}
