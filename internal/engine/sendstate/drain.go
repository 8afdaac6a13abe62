package sendstate

import (
	"context"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// CoalesceGrace is how much longer than the coalesce wait the claim holds
// an email intent that Batcher.FreezeDue may batch: FreezeDue freezes a
// partial batch once the wait has passed since its oldest intent came due,
// and the grace leaves the drain that long to run it (its timer wakes it
// then) before a claim may take one of those intents alone.
const CoalesceGrace = 100 * time.Millisecond

// holdFor is how long a claim with the coalesce wait wait holds an
// intent FreezeDue may batch, from its due time: the wait and
// CoalesceGrace, or zero when coalescing is off (see
// ClaimOptions.CoalesceWait).
func holdFor(wait time.Duration) time.Duration {
	if wait <= 0 {
		return 0
	}
	return wait + CoalesceGrace
}

// DrainClaim is one intent that ClaimDue claimed.
type DrainClaim struct {
	Claimed
	// RateLimited is the intent's 429s in a row before this attempt.
	RateLimited int
	// RunKey is the intent's run, or "": a send of a run is bulk.
	RunKey string
	// Tries is this attempt's number as River numbers a job's: the claims
	// whose attempt counted, this one included (a snooze, or a send cut
	// off by a stop or a crash, gives its try back). MaxAttempts and the
	// backoff read it.
	Tries int
}

// ClaimDue claims up to n due intents of opts.Queue that have no River job
// of their own (job_id NULL: the drain's intents) in one statement and commits the claim
// before it returns, so that no send starts before its claim is durable:
// the rows are read to the end of RETURNING first. It takes intents
// without a run (transactional) before those of runs (bulk), each in due
// order, skips intents of paused runs and rows other drains have locked
// (SKIP LOCKED), and sets each claimed row as ClaimMany does: one attempt
// more, sending, owned by opts.Owner, the suppression list looked up at
// the first claim. With opts.CoalesceWait it holds the email intents that
// FreezeDue may still batch until that wait has passed (see holdFor).
//
// With an owner, nothing is claimed unless the owner's lease is held; when
// it is not, ClaimDue returns ErrLeaseLost.
func ClaimDue(ctx context.Context, db DB, n int, opts ClaimOptions) ([]*DrainClaim, error) {
	if n <= 0 {
		return nil, nil
	}
	// Every row is read, and the rows closed (which reads the server's
	// answer to its end: with a pool, the statement's own transaction has
	// committed by then), before any claim is handed out.
	claims, err := store.ClaimDueIntents(ctx, db, n, queueOrDefault(opts.Queue), opts.Owner, opts.KeyFingerprint,
		opts.ReplayWindow, holdFor(opts.CoalesceWait))
	if err != nil {
		return nil, fmt.Errorf("sendstate: claim due intents: %w", err)
	}
	var out []*DrainClaim
	for i := range claims {
		c := &claims[i]
		out = append(out, &DrainClaim{RateLimited: c.RateLimited, RunKey: c.RunKey, Tries: c.Tries,
			Claimed: Claimed{Record: record(&c.Intent), WindowLeft: c.WindowLeft, Owner: opts.Owner}})
	}
	if opts.Owner != 0 && len(out) == 0 {
		ok, err := LeaseHeld(ctx, db, opts.Owner)
		if err != nil {
			return nil, fmt.Errorf("sendstate: claim due intents: %w", err)
		}
		if !ok {
			return nil, fmt.Errorf("sendstate: claim due intents: %w", ErrLeaseLost)
		}
	}
	return out, nil
}

// AnyDue reports whether a claim would find a due intent of the drain of
// queue ("" is outbox.DefaultQueue) now (job-less, pending, due, not of a
// paused run, and not held for coalescing by coalesceWait, as
// ClaimOptions.CoalesceWait holds it), without claiming or
// locking anything: a drain with nothing to do looks with it before it
// takes a token of the fleet's budget. One probe of the due index.
func AnyDue(ctx context.Context, db DB, queue string, coalesceWait time.Duration) (bool, error) {
	due, err := store.AnyDueIntent(ctx, db, queueOrDefault(queue), holdFor(coalesceWait))
	if err != nil {
		return false, fmt.Errorf("sendstate: look for due intents: %w", err)
	}
	return due, nil
}

// NextDue is AnyDue for a drain that sleeps until its queue's next intent
// comes due: it reports whether a claim would find a due intent now and,
// when none is due, how long until the first of the pending intents of
// queue comes due (by the database's clock; ok false when none is pending
// with a due time ahead). An intent of a paused run does not count; one
// held for coalescing is woken by the coalescer's own timer. One
// statement: AnyDue's probe, and the first entry past now of each half of
// the due index (outside runs, and of runs).
func NextDue(ctx context.Context, db DB, queue string, coalesceWait time.Duration) (due bool, next time.Duration, ok bool, err error) {
	due, in, err := store.NextDueIntent(ctx, db, queueOrDefault(queue), holdFor(coalesceWait))
	if err != nil {
		return false, 0, false, fmt.Errorf("sendstate: look for due intents: %w", err)
	}
	if in != nil {
		next, ok = *in, true
	}
	return due, next, ok, nil
}

// queueOrDefault is queue, or outbox.DefaultQueue for "".
func queueOrDefault(queue string) string {
	if queue == "" {
		return outbox.DefaultQueue
	}
	return queue
}
