package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/outbox"
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
// into batches, one queue and run at a time (a batch never mixes queues,
// nor runs, nor a run's members with lone intents). The first
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
	in      chan joinRequest
}

// group is what the intents of one batch share.
type group struct{ queue, run string }

type joinRequest struct {
	group group
	req   sendstate.ClaimRequest
	done  chan joinResult
}

type joinResult struct {
	batchKey string // empty: send alone
	err      error
}

// gathering is a batch being gathered: its requests and when it is due.
type gathering struct {
	reqs []joinRequest
	due  time.Time
}

func newCoalescer(ctx context.Context, b *sendstate.Batcher, max int, wait time.Duration, logger *slog.Logger) *coalescer {
	c := &coalescer{ctx: ctx, batcher: b, max: max, wait: wait, logger: logger, in: make(chan joinRequest)}
	go c.loop()
	return c
}

// join offers a job's intent to the next batch of queue and run (empty for
// a lone intent) and waits until the batch is frozen. It returns the
// batch's key, or "" when the intent must be sent alone (it was alone, or
// may not join a batch: not email, attempted before, or not this job's).
func (c *coalescer) join(ctx context.Context, queue, run string, req sendstate.ClaimRequest) (string, error) {
	r := joinRequest{group: group{queue, run}, req: req, done: make(chan joinResult, 1)}
	select {
	case c.in <- r:
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

// loop gathers requests by group and freezes each batch when it is full
// or due; at the worker's end it freezes what it holds.
func (c *coalescer) loop() {
	pending := map[group]*gathering{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var next time.Time
		for _, gt := range pending {
			if next.IsZero() || gt.due.Before(next) {
				next = gt.due
			}
		}
		var due <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			due = timer.C
		}
		select {
		case r := <-c.in:
			gt := pending[r.group]
			if gt == nil {
				gt = &gathering{due: time.Now().Add(c.wait)}
				pending[r.group] = gt
			}
			gt.reqs = append(gt.reqs, r)
			if len(gt.reqs) >= c.max {
				delete(pending, r.group)
				go c.freeze(r.group, gt.reqs)
			}
		case <-due:
			now := time.Now()
			for g, gt := range pending {
				if !now.Before(gt.due) {
					delete(pending, g)
					go c.freeze(g, gt.reqs)
				}
			}
		case <-c.ctx.Done():
			for g, gt := range pending {
				go c.freeze(g, gt.reqs)
			}
			return
		}
	}
}

func (c *coalescer) freeze(g group, batch []joinRequest) {
	if len(batch) == 1 {
		batch[0].done <- joinResult{}
		return
	}
	reqs := make([]sendstate.ClaimRequest, len(batch))
	for i, r := range batch {
		reqs[i] = r.req
	}
	key, joined, err := c.batcher.Freeze(context.WithoutCancel(c.ctx), g.queue, g.run, reqs)
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

// dueCoalescer gathers the drain's email intents (those without a River
// job of their own) into batches, one queue and run at a time, with
// sendstate's Batcher.FreezeDue: a full batch at once, a partial one once
// the coalesce wait has passed since its oldest intent came due. The claim
// holds those intents as long (sendstate.ClaimOptions.CoalesceWait), so
// one is sent alone only when no other could join it. The frozen batches
// are sent by their River jobs, as the coalescer's are.
//
// It freezes only when the drain may have new due intents: after a wake
// (a notification of a new row, the sweeper's interval, or its own timer),
// at the drain's next probe or claim round; a drain busy with sends
// that nobody woke costs no statement more. Its timer wakes the drain when
// an intent it left waiting moves on (FrozenDue.NextIn), so a partial
// batch or a lone intent goes then, not at the sweeper's next interval.
// A claim holds such an intent sendstate.CoalesceGrace past the wait, so
// that a group whose wait has just passed is frozen before a claim could
// take one of its intents alone; a round whose timer is overdue freezes
// too, should the timer's goroutine be late.
type dueCoalescer struct {
	batcher *sendstate.Batcher
	queue   string
	max     int
	wait    time.Duration
	logger  *slog.Logger
	// observer is told of each intent frozen into a batch
	// (ResultCoalesced), as a job that joins one tells it.
	observer Observer
	wake     func() // the drain's wake

	// dirty says a wake came since the last FreezeDue began.
	dirty atomic.Bool
	// running is held by a freeze: a probe's and a claim round's take
	// turns rather than read the same intents twice.
	running sync.Mutex

	mu    sync.Mutex
	timer *time.Timer // wakes the drain at `at`
	at    time.Time   // zero: the timer is not set
	ended bool

	// afterFreeze, when set (by tests), is told what each FreezeDue did.
	afterFreeze func(sendstate.FrozenDue)
}

// ripeSlack is added to the timer's wait: the timer runs on this machine's
// clock, the wait on the database's, and a wake a little late finds the
// wait passed, where one a little early would leave it to the sweeper.
const ripeSlack = 10 * time.Millisecond

func newDueCoalescer(b *sendstate.Batcher, queue string, max int, wait time.Duration, logger *slog.Logger, observer Observer) *dueCoalescer {
	c := &dueCoalescer{batcher: b, queue: queue, max: max, wait: wait, logger: logger, observer: observer}
	c.dirty.Store(true) // the drain's first probe looks
	return c
}

// woken notes that the drain was woken: its next freeze looks.
func (c *dueCoalescer) woken() { c.dirty.Store(true) }

// freeze freezes the due intents into batches when a wake came since it
// last did, again while a call says more may be frozen at once, and sets
// the timer for the intents it left waiting. A failure is logged: the
// intents it concerned go alone once their wait has passed, and the next
// wake tries again.
func (c *dueCoalescer) freeze(ctx context.Context) {
	c.running.Lock()
	defer c.running.Unlock()
	if !c.dirty.Swap(false) && !c.overdue() {
		return
	}
	for {
		res, err := c.batcher.FreezeDue(ctx, c.queue, c.max, c.wait)
		if c.afterFreeze != nil {
			c.afterFreeze(res)
		}
		if err != nil && ctx.Err() == nil {
			c.logger.Warn("coalesce: cannot freeze the drain's due intents into batches; "+
				"they are tried again at the next wake, and go alone once their wait has passed", "error", err)
		}
		if res.Batches > 0 {
			c.logger.Debug("coalesce: froze due intents into batches", "batches", res.Batches, "members", res.Members)
		}
		for range res.Members {
			c.observer.Observe(Outcome{Kind: outbox.KindEmail, Result: ResultCoalesced})
		}
		c.wakeIn(res.NextIn)
		if err != nil || !res.More {
			return
		}
	}
}

// overdue says the timer's time has come and it has not fired yet: a
// freeze is due whether or not its wake has come (the timer's goroutine
// may be late).
func (c *dueCoalescer) overdue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.at.IsZero() && !time.Now().Before(c.at)
}

// wakeIn sets the timer to wake the drain after d (plus ripeSlack), unless
// it is set to wake it sooner; d of zero or less sets nothing.
func (c *dueCoalescer) wakeIn(d time.Duration) {
	if d <= 0 {
		return
	}
	d += ripeSlack
	now := time.Now()
	at := now.Add(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ended || (c.at.After(now) && !at.Before(c.at)):
	case c.timer == nil:
		c.timer, c.at = time.AfterFunc(d, c.fire), at
	default:
		c.timer.Reset(d)
		c.at = at
	}
}

// fire wakes the drain: the wait of an intent left waiting has passed.
func (c *dueCoalescer) fire() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
	c.wake()
}

// stop stops the timer for good.
func (c *dueCoalescer) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.timer != nil {
		c.timer.Stop()
	}
}
