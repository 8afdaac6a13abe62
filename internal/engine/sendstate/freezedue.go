package sendstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/store"
)

// freezeDueScan bounds the intents one FreezeDue reads: at most this many
// are gathered into batches by one call (FrozenDue.More says to call
// again).
const freezeDueScan = 500

// freezeLockClass is the first key of the advisory lock each of
// FreezeDue's transactions takes for its queue and run (the second is a
// hash of the two), with pg_advisory_xact_lock: the freezes of one group
// take turns across the fleet.
const freezeLockClass int32 = 0x73667a65 // "sfze"

// FrozenDue is what one FreezeDue did.
type FrozenDue struct {
	// Batches is the batches frozen, and Members the intents bound to them.
	Batches, Members int
	// More says FreezeDue read as many intents as it reads at once and
	// froze some: more may be waiting, and a call now may freeze them.
	More bool
	// NextIn, when positive, is how long until an intent left waiting
	// moves on: the wait of a group that is not full passes (a call then
	// freezes it), or the hold of an intent that did not join passes
	// (ClaimDue then takes it alone; see CoalesceGrace). Zero: no intent
	// read is left waiting.
	NextIn time.Duration
}

// dueCandidate is an intent FreezeDue may gather: its key, its run ("" for
// none), and how long until its coalesce wait has passed (zero or less: it
// has).
type dueCandidate struct {
	key, run string
	left     time.Duration
}

// FreezeDue gathers the drain's email intents of queue ("" is
// outbox.DefaultQueue) into batches, as the coalescer gathers the intents
// of River jobs: it reads the intents ClaimDue would claim (pending,
// without a River job, due, of queue, not of a paused run, in ClaimDue's
// order) that may join a batch (email, never attempted, in no batch, with
// a topic only when b.Unsubscribe signs its headers), up to freezeDueScan
// of them, and groups them by run (intents without a run are a group of
// their own). A group freezes up to size intents at a time into a batch of
// the queue and the run, through Freeze's checks and writes: a full one at
// once, a smaller one of two or more once wait has passed since its oldest
// intent came due (ClaimDue holds each such intent that long, see
// ClaimOptions.CoalesceWait, and CoalesceGrace longer), so a batch fills
// for no longer than wait, as the coalescer's does. An intent left alone
// is not frozen: ClaimDue sends it alone once its hold has passed. Frozen intents name the batch and its
// job (job_id), which sends them; the drain no longer sees them.
//
// The read locks nothing. Each batch is frozen in a transaction of its
// own, which takes the group's advisory lock (freezeLockClass), then locks
// the run's row (FOR SHARE) and then the intents (FOR UPDATE SKIP LOCKED),
// in the order CancelRun and RescheduleRun lock them, and checks each
// intent again: locking the intents first and the run after would
// deadlock with a cancel of the run. The advisory lock makes two freezes
// of one group (two drains of the queue, woken at once) take turns: the
// second finds the first's members bound and freezes what is left, where
// at once they would split the group's rows between them, and a row left
// alone by both would go alone. An intent a claim has locked is skipped,
// and one that changed since the read (claimed, frozen, canceled,
// rescheduled) does not join. A batch whose
// freeze fails is left as it was (its intents go alone once their wait
// has passed), the others are frozen, and the failures are returned
// joined.
func (b *Batcher) FreezeDue(ctx context.Context, queue string, size int, wait time.Duration) (FrozenDue, error) {
	var res FrozenDue
	if size < 2 {
		return res, nil
	}
	queue = queueOrDefault(queue)
	rows, err := store.SelectDueForBatch(ctx, b.Pool, queue, freezeDueScan, wait, b.Unsubscribe != nil)
	if err != nil {
		return res, fmt.Errorf("sendstate: freeze due intents: read them: %w", err)
	}
	// A batch is filled from one group: a run (whose members are all of
	// its tenant), or the intents of one tenant that are in no run.
	var order []string // the groups in the order of their first intent
	groups := map[string][]dueCandidate{}
	read := len(rows)
	for _, r := range rows {
		c := dueCandidate{key: r.Key, run: r.RunKey, left: r.Left}
		g := "run:" + c.run
		if c.run == "" {
			g = "tenant:" + r.Tenant
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], c)
	}

	var errs []error
	next := func(in time.Duration) {
		if in > 0 && (res.NextIn == 0 || in < res.NextIn) {
			res.NextIn = in
		}
	}
	grace := CoalesceGrace // ClaimDue's hold past the wait, as holdFor has it
	if wait <= 0 {
		grace = 0
	}
	toFreeze := func(c dueCandidate) { next(c.left) }        // its group's wait
	toClaim := func(c dueCandidate) { next(c.left + grace) } // ClaimDue's hold
	for _, g := range order {
		cs := groups[g]
		run := cs[0].run
		for len(cs) >= 2 {
			part := cs[:min(len(cs), size)]
			if len(part) < size && part[0].left > 0 {
				// Not full, and its oldest intent is within its wait:
				// it may fill yet.
				toFreeze(part[0])
				break
			}
			cs = cs[len(part):]
			joined, err := b.freezeDue(ctx, queue, run, part)
			if err != nil {
				if ctx.Err() != nil {
					return res, fmt.Errorf("sendstate: freeze due intents: %w", err)
				}
				errs = append(errs, fmt.Errorf("run %q: %w", run, err))
				for _, c := range part {
					toClaim(c)
				}
				continue
			}
			if len(joined) > 0 {
				res.Batches++
				res.Members += len(joined)
			}
			// An intent that did not join goes alone once its wait has
			// passed.
			for _, c := range part {
				if !joined[c.key] {
					toClaim(c)
				}
			}
		}
		if len(cs) == 1 {
			toClaim(cs[0])
		}
	}
	res.More = read == freezeDueScan && res.Batches > 0
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("sendstate: freeze due intents: %w", err)
	}
	return res, nil
}

// freezeDue freezes the drain's intents of part into a batch of queue and
// run in a transaction of its own; it returns the keys that joined (none
// when fewer than two could).
func (b *Batcher) freezeDue(ctx context.Context, queue, run string, part []dueCandidate) (map[string]bool, error) {
	reqs := make([]ClaimRequest, len(part))
	for i, c := range part {
		reqs[i] = ClaimRequest{Key: c.key} // JobID 0: no River job
	}
	var keys []string
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		if err := store.LockFreezeGroup(ctx, tx, freezeLockClass, queue, run); err != nil {
			return fmt.Errorf("take the group's lock: %w", err)
		}
		var err error
		_, _, keys, err = b.freeze(ctx, tx, queue, run, reqs, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	joined := make(map[string]bool, len(keys))
	for _, k := range keys {
		joined[k] = true
	}
	return joined, nil
}
