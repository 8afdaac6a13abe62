package worker

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/sendstate"
)

// batcher turns the two row updates every send makes (Claim before the API
// call, MarkSent after it) into one statement for all the sends that reach
// that point at the same moment. It never waits to fill a batch: a loop
// takes whatever requests are queued when it is free, so a lone send costs
// what it did unbatched, and a busy worker makes far fewer statements (and
// WAL flushes) than sends. Each send still waits for its own batch, so
// nothing is reported done before it is committed.
type batcher struct {
	pool   *pgxpool.Pool
	opts   sendstate.ClaimOptions
	claims chan claimRequest
	sents  chan sentRequest
}

// batchLoops is how many batches of each kind may be in flight at once;
// batchMax bounds one batch.
const (
	batchLoops = 3
	batchMax   = 200
)

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
	err      error
}

// newBatcher starts the batch loops; they end when ctx does.
func newBatcher(ctx context.Context, pool *pgxpool.Pool, opts sendstate.ClaimOptions) *batcher {
	b := &batcher{pool: pool, opts: opts, claims: make(chan claimRequest), sents: make(chan sentRequest)}
	for range batchLoops {
		go b.claimLoop(ctx)
		go b.sentLoop(ctx)
	}
	return b
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

// markSent waits for its batch whatever ctx says: once the API has answered,
// the answer must be recorded if at all possible.
func (b *batcher) markSent(ctx context.Context, s sendstate.Sent) (bool, error) {
	req := sentRequest{sent: s, done: make(chan sentResult, 1)}
	select {
	case b.sents <- req:
		res := <-req.done
		return res.overrode, res.err
	case <-ctx.Done():
		// The loops are gone (the worker is stopping): record it alone.
		return sendstate.MarkSent(context.WithoutCancel(ctx), b.pool, s)
	}
}

func (b *batcher) claimLoop(ctx context.Context) {
	for {
		var first claimRequest
		select {
		case first = <-b.claims:
		case <-ctx.Done():
			return
		}
		batch := drain(b.claims, first)
		reqs := make([]sendstate.ClaimRequest, len(batch))
		for i, r := range batch {
			reqs[i] = r.req
		}
		claimed, err := sendstate.ClaimMany(context.WithoutCancel(ctx), b.pool, reqs, b.opts)
		for _, r := range batch {
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
	}
}

func (b *batcher) sentLoop(ctx context.Context) {
	for {
		var first sentRequest
		select {
		case first = <-b.sents:
		case <-ctx.Done():
			return
		}
		batch := drain(b.sents, first)
		sent := make([]sendstate.Sent, len(batch))
		for i, r := range batch {
			sent[i] = r.sent
		}
		overrode, err := sendstate.MarkSentMany(context.WithoutCancel(ctx), b.pool, sent)
		for _, r := range batch {
			r.done <- sentResult{overrode: slices.Contains(overrode, r.sent.Key), err: err}
		}
	}
}

// drain returns first and whatever else is queued on ch, up to batchMax,
// without waiting.
func drain[T any](ch chan T, first T) []T {
	batch := []T{first}
	for len(batch) < batchMax {
		select {
		case r := <-ch:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}
