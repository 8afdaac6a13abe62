package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// batcher turns the two row updates every send makes (Claim before the API
// call, MarkSent after it) into one statement each for all the sends that
// reach that point at the same moment. It never waits to fill a batch: its
// loop takes whatever requests are queued when it is free, so a lone send
// costs what it did unbatched, and a busy worker makes far fewer statements
// (and WAL flushes) than sends. Each send still waits for its own batch, so
// nothing is reported done before it is committed.
//
// One loop does both kinds, one round at a time: the answers queued, then
// the claims queued, in one transaction (one commit, one WAL flush) when
// there are both. A call costs the database far more than a row of it
// (executor start-up, the commit and its flush), so fewer, larger calls are
// cheaper. Measured with the drain benchmark (20,000 intents, concurrency
// 500; database CPU per intent, medians of 4 runs): three loops of each
// kind, as before, made about 1,600 calls and cost 140 µs; one loop of each
// kind, about 670 calls and 123 µs; this one loop for both, 108 µs. The
// rate did not drop: while a round runs, the next one's requests queue.
type batcher struct {
	pool *pgxpool.Pool
	// conn is the connection the loop's rounds run on, held from one
	// round to the next (nil: none; the next round acquires one), so
	// that its statements are prepared and planned on one connection: a
	// prepared statement is planned afresh for its first five runs on each
	// connection, and the claim's plan costs a millisecond or two, so a
	// loop that took whichever pooled connection was free paid that on
	// each of them (at 20/s, 300-440 µs of planning per claim, 110-160 µs
	// of the database's CPU per intent). A round whose statement fails
	// gives it back (it may be broken: the database restarted).
	conn *pgxpool.Conn
	// opts are the claims' options, read at each round (the lease's epoch
	// may change).
	opts   func() (sendstate.ClaimOptions, error)
	claims chan claimRequest
	sents  chan sentRequest
	dues   chan dueRequest
	looks  chan lookRequest
	// freeze, when set (the drain's, with coalescing on), runs before
	// each claim of due intents: what may be batched is frozen into
	// batches before a claim could send it alone.
	freeze func(context.Context)
	// paced, when set (by Worker.Start, the drain's), reports that slots
	// wait for tokens of the fleet's budget: the sends are paced by it,
	// not by the slots, so an answer may wait a little for others, or for
	// a claim, to be recorded with them (see holdAnswers).
	paced func() bool
	// fair, when set (by Worker.Start, the drain's), shares the claims of
	// due intents among the tenants (see fair); nil: claims take them in
	// the due index's order (sendstate.ClaimDue).
	fair *fair
	// flying are the drained intents claimed and handed out whose attempt
	// has not ended: what the worker has in flight (see orphans).
	flying flights
	// orphansAt is when orphans (see drain.releaseOrphans) last may have
	// come to be (unix nanoseconds; 0: never): a claim of due intents
	// failed, and its answer may have been lost after the database
	// committed it; or the sweeper lost its connection, and a database
	// crash may have lost marks it had acknowledged (a lone mark commits
	// without waiting for the WAL flush).
	orphansAt atomic.Int64
}

// flights is a set of the keys of drained intents in flight: added when
// their claim is handed out, removed when their attempt has ended (its
// outcome recorded, or released). A drained intent sending under this
// worker's claim and not in it is an orphan: a claim the database committed
// whose answer the worker never read (see sendstate.ReleaseOrphans).
type flights struct {
	mu   sync.Mutex
	keys map[string]int
}

func (f *flights) add(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys = map[string]int{}
	}
	f.keys[key]++
}

func (f *flights) remove(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys[key]--; f.keys[key] <= 0 {
		delete(f.keys, key)
	}
}

func (f *flights) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.keys))
	for k := range f.keys {
		out = append(out, k)
	}
	return out
}

// dueRequest asks for n due intents of the drain's (sendstate.ClaimDue).
type dueRequest struct {
	n    int
	done chan dueResult
}

type dueResult struct {
	claims []*sendstate.DrainClaim // fewer than asked for: no more due
	err    error
}

// lookRequest asks for the drain's look (sendstate.DueTenants with next),
// on the loop's connection: a look costs milliseconds per thousand tenants
// to plan, and it is planned for its arguments at its first five runs on
// each connection, so a pooled connection made it cost about twice that.
type lookRequest struct {
	queue string
	hold  time.Duration
	done  chan lookResult
}

type lookResult struct {
	tenants []sendstate.DueTenant
	err     error
}

// batchMax bounds the claims, and the answers, of one round.
const batchMax = 200

// dueMax bounds the drain's claims of one round: one statement claims at
// most this many due intents.
const dueMax = 500

type claimRequest struct {
	req  sendstate.ClaimRequest
	done chan claimResult
}

type claimResult struct {
	claimed *sendstate.Claimed
	ok      bool
	err     error
}

type sentRequest struct {
	sent sendstate.Sent
	done chan sentResult
}

type sentResult struct {
	overrode bool
	err      error // sendstate.ErrLeaseLost: not recorded
}

// newBatcher returns a batcher; its loop (run) serves it. freeze, when
// not nil, runs before each claim of due intents (see batcher.freeze).
func newBatcher(pool *pgxpool.Pool, opts func() (sendstate.ClaimOptions, error), freeze func(context.Context)) *batcher {
	return &batcher{pool: pool, opts: opts, claims: make(chan claimRequest), sents: make(chan sentRequest), dues: make(chan dueRequest),
		looks: make(chan lookRequest), freeze: freeze}
}

func (b *batcher) claim(ctx context.Context, r sendstate.ClaimRequest) (*sendstate.Claimed, bool, error) {
	req := claimRequest{req: r, done: make(chan claimResult, 1)}
	select {
	case b.claims <- req:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	res := <-req.done
	return res.claimed, res.ok, res.err
}

// claimDue claims one due intent of the drain's, with whatever other due
// claims are queued, in one statement; nil when none is due. Once queued it
// waits for the answer whatever ctx says: a claim made must be sent.
func (b *batcher) claimDue(ctx context.Context) (*sendstate.DrainClaim, error) {
	cs, err := b.claimDues(ctx, 1)
	if len(cs) == 0 {
		return nil, err
	}
	return cs[0], err
}

// claimDues is claimDue for up to n due intents, in one request (a slot
// holding n tokens); fewer when no more are due.
func (b *batcher) claimDues(ctx context.Context, n int) ([]*sendstate.DrainClaim, error) {
	req := dueRequest{n: n, done: make(chan dueResult, 1)}
	select {
	case b.dues <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := <-req.done
	return res.claims, res.err
}

// look runs the drain's look (sendstate.DueTenants, with next) on the
// loop's connection, between its rounds.
func (b *batcher) look(ctx context.Context, queue string, hold time.Duration) ([]sendstate.DueTenant, error) {
	req := lookRequest{queue: queue, hold: hold, done: make(chan lookResult, 1)}
	select {
	case b.looks <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := <-req.done
	return res.tenants, res.err
}

// runLook answers a look request.
func (b *batcher) runLook(ctx context.Context, r lookRequest) {
	ts, err := sendstate.DueTenants(context.WithoutCancel(ctx), b.held(context.WithoutCancel(ctx)), r.queue, r.hold, true)
	if err != nil {
		b.drop()
	}
	r.done <- lookResult{tenants: ts, err: err}
}

// markSent waits for its batch whatever ctx says: once the API has answered,
// the answer must be recorded if at all possible.
func (b *batcher) markSent(ctx context.Context, s sendstate.Sent) (bool, error) {
	req := sentRequest{sent: s, done: make(chan sentResult, 1)}
	select {
	case b.sents <- req:
		res := <-req.done
		return res.overrode, res.err
	case <-ctx.Done():
		// The loop is gone (the worker is stopping): record it alone.
		return sendstate.MarkSent(context.WithoutCancel(ctx), b.pool, s)
	}
}

// loop serves the batcher until ctx ends, and then gives its connection
// back to the pool.
func (b *batcher) loop(ctx context.Context) {
	defer b.drop()
	for {
		var claims []claimRequest
		var sents []sentRequest
		var dues []dueRequest
		select {
		case r := <-b.claims:
			claims = append(claims, r)
		case r := <-b.sents:
			sents = append(sents, r)
		case r := <-b.dues:
			dues = append(dues, r)
		case r := <-b.looks:
			b.runLook(ctx, r)
			continue
		case <-ctx.Done():
			return
		}
	queued:
		for len(claims) < batchMax && len(sents) < batchMax && dueCount(dues) < dueMax {
			select {
			case r := <-b.claims:
				claims = append(claims, r)
			case r := <-b.sents:
				sents = append(sents, r)
			case r := <-b.dues:
				dues = append(dues, r)
			default:
				break queued
			}
		}
		if len(sents) > 0 && len(claims) == 0 && len(dues) == 0 && b.paced != nil && b.paced() {
			sents, claims, dues = b.holdAnswers(ctx, sents)
		}
		if len(dues) > 0 && b.freeze != nil {
			// In its own transactions, before the claim: a freeze that
			// fails must not fail the claims.
			b.freeze(context.WithoutCancel(ctx))
		}
		rctx := context.WithoutCancel(ctx)
		db := b.held(rctx)
		failed := false
		switch {
		case len(dues) > 0 && len(sents) > 0 && len(claims) == 0:
			// The drain's usual round: its answers and its next claims
			// in one transaction.
			failed = b.markAndClaimDues(rctx, db, sents, dues)
		default:
			if len(claims) > 0 || len(sents) > 0 {
				failed = b.round(rctx, db, claims, sents)
			}
			if len(dues) > 0 && !failed {
				failed = b.claimAllDue(rctx, db, dues)
			} else if len(dues) > 0 {
				failed = b.claimAllDue(rctx, b.pool, dues)
			}
		}
		if failed {
			b.drop()
		}
	}
}

// answerHold is how long answers wait for others, or for a claim, while
// the sends are paced by the budget (holdAnswers); answerLook is how often
// a hold looks whether they still are.
const (
	answerHold = 250 * time.Millisecond
	answerLook = 5 * time.Millisecond
)

// holdAnswers waits up to answerHold for more answers, or for a claim to
// record them with, and returns what came. At a paced rate the sends
// answer one by one, tens of milliseconds apart, and each answer alone was
// a statement and a commit: in the rate-limited benchmark (3 workers at
// 20/s) a mark per intent, the largest statement left once the claims
// were made ahead (see ahead). The senders wait, which costs nothing only
// while other slots wait for tokens that come one by one (drain.paced):
// the hold ends as soon as that is no longer so (a hold of 250 ms at
// concurrency 500 and thousands a second took the slots the rate needed:
// the drain benchmark ran at 0.30× River + client). An answer so held is recorded at most answerHold
// later; a crash meanwhile loses it as it could lose a lone mark, which
// commits without waiting for the WAL flush: the intent is sent again
// under its key, and replayed.
func (b *batcher) holdAnswers(ctx context.Context, sents []sentRequest) ([]sentRequest, []claimRequest, []dueRequest) {
	end := time.NewTimer(answerHold)
	defer end.Stop()
	look := time.NewTicker(answerLook)
	defer look.Stop()
	for len(sents) < batchMax {
		select {
		case r := <-b.sents:
			sents = append(sents, r)
		case r := <-b.claims:
			return sents, []claimRequest{r}, nil
		case r := <-b.dues:
			return sents, nil, []dueRequest{r}
		case r := <-b.looks:
			b.runLook(ctx, r)
		case <-look.C:
			if !b.paced() {
				return sents, nil, nil
			}
		case <-end.C:
			return sents, nil, nil
		case <-ctx.Done():
			return sents, nil, nil
		}
	}
	return sents, nil, nil
}

// round records the answers and makes the claims. The answers go first:
// should an answer and a claim of one intent meet in a round (a job that
// ran again beside the one that sent it), the claim then finds the intent
// sent and does not send it again.
func (b *batcher) round(ctx context.Context, db roundDB, claims []claimRequest, sents []sentRequest) (failed bool) {
	reqs := make([]sendstate.ClaimRequest, len(claims))
	for i, r := range claims {
		reqs[i] = r.req
	}
	sent := make([]sendstate.Sent, len(sents))
	for i, r := range sents {
		sent[i] = r.sent
	}
	var claimed map[int64]*sendstate.Claimed
	var overrode, notOwned []string
	opts, err := b.opts()
	switch {
	case err != nil && len(sent) == 0:
	case err != nil:
		// No lease to claim under; the answers are recorded all the same
		// (each under the lease it was claimed under).
		var markErr error
		overrode, notOwned, markErr = sendstate.MarkSentMany(ctx, b.pool, sent)
		b.answer(sents, overrode, notOwned, markErr)
		sents = nil
	case len(sent) == 0:
		claimed, err = sendstate.ClaimMany(ctx, db, reqs, opts)
	case len(reqs) == 0:
		// The answers alone: their commit need not wait for the WAL
		// flush (a crash that loses them leaves orphans, sent again under
		// their keys; see drain.connectionLost).
		overrode, notOwned, err = sendstate.MarkSentManyAsyncCommit(ctx, db, sent)
	default:
		err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var err error
			if overrode, notOwned, err = sendstate.MarkSentMany(ctx, tx, sent); err != nil {
				return err
			}
			claimed, err = sendstate.ClaimMany(ctx, tx, reqs, opts)
			return err
		})
		if err != nil {
			// The claims share the answers' fate only to save a commit:
			// whatever failed, the answers are recorded again on their own.
			claimed = nil
			var markErr error
			overrode, notOwned, markErr = sendstate.MarkSentMany(ctx, b.pool, sent)
			b.answer(sents, overrode, notOwned, markErr)
			sents = nil
		}
	}
	failed = err != nil
	b.answer(sents, overrode, notOwned, err)
	for _, r := range claims {
		switch c, ok := claimed[r.req.JobID]; {
		case err != nil:
			r.done <- claimResult{err: err}
		case ok:
			r.done <- claimResult{claimed: c, ok: true}
		default:
			// Not this job's to send.
			r.done <- claimResult{}
		}
	}
	return failed
}

// answer tells each answer's sender what became of it.
func (b *batcher) answer(sents []sentRequest, overrode, notOwned []string, err error) {
	for _, r := range sents {
		res := sentResult{overrode: slices.Contains(overrode, r.sent.Key), err: err}
		if err == nil && slices.Contains(notOwned, r.sent.Key) {
			res.err = sendstate.ErrLeaseLost
		}
		r.done <- res
	}
}

// markAndClaimDues records the answers and claims the due intents in one
// transaction (one commit, one WAL flush), answers first, as round does.
// The claims are handed out once it has committed. Should it fail, the
// answers are recorded again on their own and the claims fail (their slots
// ask again).
func (b *batcher) markAndClaimDues(ctx context.Context, db roundDB, sents []sentRequest, dues []dueRequest) (failed bool) {
	sent := make([]sendstate.Sent, len(sents))
	for i, r := range sents {
		sent[i] = r.sent
	}
	opts, err := b.opts()
	var overrode, notOwned []string
	var claimed []*sendstate.DrainClaim
	if err == nil {
		err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var err error
			if overrode, notOwned, err = sendstate.MarkSentMany(ctx, tx, sent); err != nil {
				return err
			}
			claimed, err = b.claimFair(ctx, tx, dueCount(dues), opts)
			return err
		})
	}
	if err != nil {
		var markErr error
		overrode, notOwned, markErr = sendstate.MarkSentMany(ctx, b.pool, sent)
		b.answer(sents, overrode, notOwned, markErr)
		claimed = nil
	} else {
		b.answer(sents, overrode, notOwned, nil)
	}
	b.handOut(dues, claimed, err)
	return err != nil
}

// claimAllDue claims as many due intents as dues asks for, in one statement
// that has committed before any is handed out, and hands each request
// what it asked for, in order; the requests left over get fewer, or none
// (nothing more is due).
func (b *batcher) claimAllDue(ctx context.Context, db roundDB, dues []dueRequest) (failed bool) {
	opts, err := b.opts()
	var claimed []*sendstate.DrainClaim
	if err == nil {
		claimed, err = b.claimFair(ctx, db, dueCount(dues), opts)
	}
	b.handOut(dues, claimed, err)
	return err != nil
}

// claimFair claims up to n due intents, shared among the tenants with
// due intents by the scheduler (see fair), looking at which are due first
// when it asks. A share that comes back short (its tenant ran dry, other
// workers took its intents, its limits stopped it) leaves the rest to the
// other tenants; shares of more tenants than one statement takes
// (MaxShares) are claimed in as many statements as they need. Before it
// claims fewer than n, it looks again, once, whatever the time since the
// last look: a slot left with nothing reads that nothing is due and shuts
// the drain's gate, which only a wake opens again.
func (b *batcher) claimFair(ctx context.Context, db sendstate.DB, n int, opts sendstate.ClaimOptions) ([]*sendstate.DrainClaim, error) {
	if b.fair == nil {
		return sendstate.ClaimDue(ctx, db, n, opts)
	}
	var claimed []*sendstate.DrainClaim
	asked := false  // ClaimShares ran: it checks the lease when it claims nothing
	fresh := false  // the scheduler's view is a look made since its last short share
	forced := false // the one look made only because the claim came up short
	look := func() error {
		now := time.Now()
		ts, err := sendstate.DueTenants(ctx, db, opts.Queue, opts.CoalesceWait, false)
		if err != nil {
			return err
		}
		b.fair.update(ts, now)
		fresh = true
		return nil
	}
	quantum := fairQuantum
	for round := 0; len(claimed) < n && round < 16; round++ {
		if b.fair.needLook(time.Now()) {
			if err := look(); err != nil {
				return nil, err
			}
		}
		shares := b.fair.shares(n-len(claimed), quantum, time.Now())
		if len(shares) == 0 {
			if fresh || forced {
				break
			}
			forced = true
			if err := look(); err != nil {
				return nil, err
			}
			continue
		}
		cs, err := sendstate.ClaimShares(ctx, db, shares, opts)
		if err != nil {
			return nil, err
		}
		asked = true
		claimed = append(claimed, cs...)
		if b.fair.took(shares, cs) {
			// Tenants ran dry (or were held): the rest goes to as many
			// others as it takes, one intent each, so that it is
			// claimed in a statement or two, not in ever smaller ones.
			fresh, quantum = false, 1
		}
	}
	if len(claimed) == 0 && !asked && opts.Owner != 0 {
		// ClaimDue's answer when nothing was claimed under a lease that
		// has ended.
		ok, err := sendstate.LeaseHeld(ctx, db, opts.Owner)
		if err != nil {
			return nil, fmt.Errorf("sendstate: claim due intents: %w", err)
		}
		if !ok {
			return nil, fmt.Errorf("sendstate: claim due intents: %w", sendstate.ErrLeaseLost)
		}
	}
	return claimed, nil
}

// roundDB is what a round's statements run on: the loop's held
// connection, or the pool when none could be held.
type roundDB interface {
	sendstate.DB
	Begin(context.Context) (pgx.Tx, error)
}

// held returns the loop's connection, acquiring one when none is held;
// the pool when none can be acquired now (the round's statements then
// fail or succeed as the pool's would).
func (b *batcher) held(ctx context.Context) roundDB {
	if b.conn == nil {
		c, err := b.pool.Acquire(ctx)
		if err != nil {
			return b.pool
		}
		b.conn = c
	}
	return b.conn
}

// drop gives the loop's connection back after a round that failed: it
// may be broken (the pool closes a broken one), and the next round
// acquires another.
func (b *batcher) drop() {
	if b.conn != nil {
		b.conn.Release()
		b.conn = nil
	}
}

// dueCount is how many intents the requests ask for.
func dueCount(dues []dueRequest) int {
	n := 0
	for _, r := range dues {
		n += r.n
	}
	return n
}

// handOut gives each due request as many claimed intents as it asked
// for, in order; the requests left over get fewer or none (nothing more is
// due), and all get err.
func (b *batcher) handOut(dues []dueRequest, claimed []*sendstate.DrainClaim, err error) {
	if err != nil {
		b.orphansAt.Store(time.Now().UnixNano())
	}
	if err == nil {
		for _, c := range claimed {
			b.flying.add(c.Record.Key)
		}
	}
	for _, r := range dues {
		if err != nil {
			r.done <- dueResult{err: err}
			continue
		}
		n := min(r.n, len(claimed))
		r.done <- dueResult{claims: claimed[:n:n]}
		claimed = claimed[n:]
	}
}
