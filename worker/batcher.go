package worker

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/outbox"
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
	key  string
	done chan claimResult
}

type claimResult struct {
	rec *outbox.Record
	ok  bool
	err error
}

type sentRequest struct {
	sent outbox.Sent
	done chan error
}

// newBatcher starts the batch loops; they end when ctx does.
func newBatcher(ctx context.Context, pool *pgxpool.Pool) *batcher {
	b := &batcher{pool: pool, claims: make(chan claimRequest), sents: make(chan sentRequest)}
	for range batchLoops {
		go b.claimLoop(ctx)
		go b.sentLoop(ctx)
	}
	return b
}

func (b *batcher) claim(ctx context.Context, key string) (*outbox.Record, bool, error) {
	req := claimRequest{key: key, done: make(chan claimResult, 1)}
	select {
	case b.claims <- req:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	res := <-req.done
	return res.rec, res.ok, res.err
}

// markSent waits for its batch whatever ctx says: once the API has answered,
// the answer must be recorded if at all possible.
func (b *batcher) markSent(ctx context.Context, s outbox.Sent) error {
	req := sentRequest{sent: s, done: make(chan error, 1)}
	select {
	case b.sents <- req:
		return <-req.done
	case <-ctx.Done():
		// The loops are gone (the worker is stopping): record it alone.
		return outbox.MarkSent(context.WithoutCancel(ctx), b.pool, s.Key, s.MessageID, s.Replayed)
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
		keys := make([]string, len(batch))
		for i, r := range batch {
			keys[i] = r.key
		}
		claimed, err := outbox.ClaimMany(context.WithoutCancel(ctx), b.pool, keys)
		for _, r := range batch {
			switch rec, ok := claimed[r.key]; {
			case err != nil:
				r.done <- claimResult{err: err}
			case ok:
				r.done <- claimResult{rec: rec, ok: true}
			default:
				// Not sendable (or gone): Claim says which, alone.
				rec, ok, err := outbox.Claim(context.WithoutCancel(ctx), b.pool, r.key)
				r.done <- claimResult{rec, ok, err}
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
		sent := make([]outbox.Sent, len(batch))
		for i, r := range batch {
			sent[i] = r.sent
		}
		err := outbox.MarkSentMany(context.WithoutCancel(ctx), b.pool, sent)
		for _, r := range batch {
			r.done <- err
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
