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

// DrainClaim is one intent that ClaimDue or ClaimShares claimed.
type DrainClaim struct {
	Claimed
	// RateLimited is the intent's 429s in a row before this attempt.
	RateLimited int
	// RunKey is the intent's run, or "": a send of a run is bulk.
	RunKey string
	// Tenant is the intent's tenant, "" for the default tenant.
	Tenant string
	// Tries is this attempt's number as River numbers a job's: the claims
	// whose attempt counted, this one included (a snooze, or a send cut
	// off by a stop or a crash, gives its try back). MaxAttempts and the
	// backoff read it.
	Tries int
}

// Share asks a fair claim (ClaimShares) for up to N due intents of one
// tenant ("" the default tenant) of one class (Bulk: of runs).
type Share = store.Share

// MaxShares is the most shares one ClaimShares takes.
const MaxShares = store.MaxShares

// ClaimDue claims up to n due intents of opts.Queue that have no River job
// of their own (job_id NULL: the drain's intents) in one statement and commits the claim
// before it returns, so that no send starts before its claim is durable:
// the rows are read to the end of RETURNING first. It takes intents
// without a run (transactional) before those of runs (bulk), and within
// each class one tenant's after another's, each in due order, with no
// regard to the tenants' weights or limits (the drain claims with
// ClaimShares). It skips intents of paused runs and rows other drains have locked
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
	return drainClaims(ctx, db, claims, err, opts)
}

// ClaimShares is ClaimDue for a fair drain: each share takes up to its N
// due intents of its tenant and class, in due order, and no more than the
// tenant's own limits (its rate and quotas, sendonce_tenant) allow now,
// which it spends: every claim takes a token of the tenant's rate, and a
// first attempt counts against its quotas. A share may come back short:
// the tenant had fewer due, or its limits stopped it. At most MaxShares
// shares.
func ClaimShares(ctx context.Context, db DB, shares []Share, opts ClaimOptions) ([]*DrainClaim, error) {
	if len(shares) == 0 {
		return nil, nil
	}
	claims, err := store.ClaimDueShares(ctx, db, shares, queueOrDefault(opts.Queue), opts.Owner, opts.KeyFingerprint,
		opts.ReplayWindow, holdFor(opts.CoalesceWait))
	return drainClaims(ctx, db, claims, err, opts)
}

// drainClaims is the claims a drain's claim statement returned, or its
// error; with an owner and no claim, ErrLeaseLost when the owner's lease
// is no longer held.
func drainClaims(ctx context.Context, db DB, claims []store.ClaimedIntent, err error, opts ClaimOptions) ([]*DrainClaim, error) {
	if err != nil {
		return nil, fmt.Errorf("sendstate: claim due intents: %w", err)
	}
	var out []*DrainClaim
	for i := range claims {
		c := &claims[i]
		out = append(out, &DrainClaim{RateLimited: c.RateLimited, RunKey: c.RunKey, Tenant: c.Tenant, Tries: c.Tries,
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

// DueTenant is a tenant with intents of one class pending for a drain:
// whether one is due now, when the next comes due, its weight, and what
// its limits leave (see DueTenants).
type DueTenant = store.DueTenant

// DueTenants lists the tenants with intents of the drain of queue ("" is
// outbox.DefaultQueue) pending, one entry per tenant and class (the
// transactional class first, tenants in name order): whether one is due
// now (with next: not of a paused run, not held for coalescing by
// coalesceWait, and if none is, how long until the first comes due, two
// probes more per tenant, which the drain's look before it sleeps needs;
// without, a tenant whose first intent's due time has come, which serves
// a claim's look: the claim is the judge); the tenant's weight
// (1 without settings); and how many intents its limits let a claim take
// now, or how long until they let one. It claims and locks nothing. One
// statement; its cost grows with the tenants that have intents pending
// (a few index probes each), not with the intents.
func DueTenants(ctx context.Context, db DB, queue string, coalesceWait time.Duration, next bool) ([]DueTenant, error) {
	ts, err := store.DueTenants(ctx, db, queueOrDefault(queue), holdFor(coalesceWait), next)
	if err != nil {
		return nil, fmt.Errorf("sendstate: look for due intents: %w", err)
	}
	return ts, nil
}

// AnyDue reports whether a claim would find a due intent of the drain of
// queue ("" is outbox.DefaultQueue) now (job-less, pending, due, not of a
// paused run, and not held for coalescing by coalesceWait, as
// ClaimOptions.CoalesceWait holds it), the tenants' limits aside, without
// claiming or locking anything (DueTenants).
func AnyDue(ctx context.Context, db DB, queue string, coalesceWait time.Duration) (bool, error) {
	due, _, _, err := NextDue(ctx, db, queue, coalesceWait)
	return due, err
}

// NextDue is AnyDue for a drain that sleeps until its queue's next intent
// comes due: it reports whether a claim would find a due intent now and,
// when none is due, how long until the first of the pending intents of
// queue comes due (by the database's clock; ok false when none is pending
// with a due time ahead). An intent of a paused run does not count; one
// held for coalescing is woken by the coalescer's own timer.
func NextDue(ctx context.Context, db DB, queue string, coalesceWait time.Duration) (due bool, next time.Duration, ok bool, err error) {
	ts, err := DueTenants(ctx, db, queue, coalesceWait, true)
	if err != nil {
		return false, 0, false, err
	}
	for _, t := range ts {
		if t.Due {
			return true, 0, false, nil
		}
		if t.Next != nil && (!ok || *t.Next < next) {
			next, ok = *t.Next, true
		}
	}
	return false, next, ok, nil
}

// queueOrDefault is queue, or outbox.DefaultQueue for "".
func queueOrDefault(queue string) string {
	if queue == "" {
		return outbox.DefaultQueue
	}
	return queue
}
