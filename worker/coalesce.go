package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sendonce/sendonce/internal/sendstate"
)

// Coalescing limits.
const (
	// MaxCoalesce is the most intents one batch holds: the API's limit
	// for POST /emails/batch.
	MaxCoalesce = 100
	// DefaultCoalesceWait is how long a partial batch waits to fill.
	DefaultCoalesceWait = 200 * time.Millisecond
)

// coalescer gathers the email intents whose jobs run at about the same time
// into batches, one queue at a time (a batch never mixes queues). The first
// job to arrive starts a batch; it is frozen when it holds max intents or
// wait after that first arrival, whichever comes first, so no intent is held
// longer than wait. Every job waits for its batch to be frozen (or not:
// a lone intent goes alone) before its Work returns, so a crash before the
// freeze leaves its job to run again, and one after it leaves a batch job.
type coalescer struct {
	ctx     context.Context // ends with the worker
	batcher *sendstate.Batcher
	max     int
	wait    time.Duration
	logger  *slog.Logger

	mu     sync.Mutex
	queues map[string]chan joinRequest
}

type joinRequest struct {
	req  sendstate.ClaimRequest
	done chan joinResult
}

type joinResult struct {
	batchKey string // empty: send alone
	err      error
}

func newCoalescer(ctx context.Context, b *sendstate.Batcher, max int, wait time.Duration, logger *slog.Logger) *coalescer {
	return &coalescer{ctx: ctx, batcher: b, max: max, wait: wait, logger: logger, queues: map[string]chan joinRequest{}}
}

// join offers a job's intent to the next batch on queue and waits until
// the batch is frozen. It returns the batch's key, or "" when the intent
// must be sent alone (it was alone, or may not join a batch: not email,
// attempted before, or not this job's).
func (c *coalescer) join(ctx context.Context, queue string, req sendstate.ClaimRequest) (string, error) {
	r := joinRequest{req: req, done: make(chan joinResult, 1)}
	select {
	case c.queue(queue) <- r:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-c.ctx.Done():
		return "", nil // stopping: send alone
	}
	// The freeze is one short transaction; its outcome must be known
	// whatever ctx says, so wait for it.
	res := <-r.done
	return res.batchKey, res.err
}

func (c *coalescer) queue(name string) chan joinRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.queues[name]
	if !ok {
		ch = make(chan joinRequest)
		c.queues[name] = ch
		go c.loop(name, ch)
	}
	return ch
}

func (c *coalescer) loop(queue string, ch chan joinRequest) {
	for {
		var first joinRequest
		select {
		case first = <-ch:
		case <-c.ctx.Done():
			return
		}
		batch := []joinRequest{first}
		timer := time.NewTimer(c.wait)
	fill:
		for len(batch) < c.max {
			select {
			case r := <-ch:
				batch = append(batch, r)
			case <-timer.C:
				break fill
			case <-c.ctx.Done():
				break fill
			}
		}
		timer.Stop()
		go c.freeze(queue, batch)
	}
}

func (c *coalescer) freeze(queue string, batch []joinRequest) {
	if len(batch) == 1 {
		batch[0].done <- joinResult{}
		return
	}
	reqs := make([]sendstate.ClaimRequest, len(batch))
	for i, r := range batch {
		reqs[i] = r.req
	}
	key, joined, err := c.batcher.Freeze(context.WithoutCancel(c.ctx), queue, reqs)
	if err != nil {
		c.logger.Warn("coalesce: cannot freeze a batch; its intents are tried again", "error", err, "intents", len(batch))
	} else if key != "" {
		c.logger.Debug("coalesce: froze a batch", "batch", key, "members", len(joined))
	}
	in := make(map[int64]bool, len(joined))
	for _, id := range joined {
		in[id] = true
	}
	for _, r := range batch {
		switch {
		case err != nil:
			r.done <- joinResult{err: err}
		case in[r.req.JobID]:
			r.done <- joinResult{batchKey: key}
		default:
			r.done <- joinResult{}
		}
	}
}
