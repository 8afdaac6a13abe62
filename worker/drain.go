package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// drain sends the intents of the worker's queue: every intent enqueued
// from Go or inserted with plain SQL has no River job of its own (job_id
// NULL), and is the drain's until it is settled. Its slots, Concurrency
// of them, each take a token of the fleet's budget, then a due intent from
// the batcher, which claims the due intents of all the slots that ask at
// the same moment in one statement (sendstate.ClaimDue) and commits it
// before any of them is sent. A slot whose claim found nothing gives its
// token back and shuts the gate (see gate): the slots then wait until a
// notification of a new row, or the sweeper's next interval (which finds
// retries come due), wakes them. Retries live on the intent's row.
//
// With coalescing on (Config.Coalesce), a probe, and each claim round
// after a wake, first freezes the due email intents into batches (see
// dueCoalescer); the claims hold such an intent until the coalesce wait
// has passed since it came due, and then send it alone.
type drain struct {
	w        *sendWorker
	slots    int
	timeout  time.Duration // one send's bound, Config.JobTimeout
	interval time.Duration // how long a slot waits after a failed claim
	gate     gate
	// coalesce, set (by New) with Config.Coalesce, batches the due
	// email intents; nil: coalescing is off.
	coalesce *dueCoalescer
	// fair shares the claims among the tenants with due intents (the
	// batcher's claims ask it).
	fair fair

	// dueMu guards due and dueAt: the timer that wakes the drain when the
	// next pending intent of its queue comes due (wakeIn), and when.
	dueMu sync.Mutex
	due   *time.Timer
	dueAt time.Time

	// waiting counts the slots waiting for a token of the budget; ahead
	// holds the intents claimed for them (see ahead).
	waiting atomic.Int32
	ahead   ahead
	// lastToken and tokenGap time this worker's tokens (unix ns, and a
	// moving average of the time between them; see slowPace).
	lastToken, tokenGap atomic.Int64
	// afterAhead, set by tests, hears how many intents each claim left
	// ahead.
	afterAhead func(n int)

	work   context.Context // sends run in it; cancelled when a stop gives up waiting
	cancel context.CancelFunc
	stop   context.CancelFunc // ends the slots' taking of new intents
	done   sync.WaitGroup
}

// start starts the slots. Sends in flight when ctx ends (stop) finish
// under work, which ends only at halt.
func (d *drain) start(ctx context.Context) {
	d.work, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	fetch, stop := context.WithCancel(ctx)
	d.stop = stop
	d.gate.init()
	for range d.slots {
		d.done.Go(func() { d.slot(fetch) })
	}
}

// wake tells the slots there may be due intents.
func (d *drain) wake() {
	if d != nil {
		d.fair.poke()
		if d.coalesce != nil {
			d.coalesce.woken()
		}
		d.gate.wake()
	}
}

// dueMargin is how long after an intent's due time, as the database
// reported it, the drain's timer wakes it, so that the database's clock has
// passed it too.
const dueMargin = 10 * time.Millisecond

// wakeIn wakes the drain in d (plus dueMargin), when an intent comes due
// then: a retry or a snooze this worker recorded, or the first intent a
// probe found due later (sendstate.NextDue). A wake set for sooner stands.
// Without it the drain looked every sweep interval for what came due.
func (d *drain) wakeIn(in time.Duration) {
	if d == nil {
		return
	}
	in = max(in, 0) + dueMargin
	at := time.Now().Add(in)
	d.dueMu.Lock()
	defer d.dueMu.Unlock()
	if !d.dueAt.IsZero() && !at.Before(d.dueAt) {
		return
	}
	d.dueAt = at
	if d.due == nil {
		d.due = time.AfterFunc(in, d.dueWake)
		return
	}
	d.due.Reset(in)
}

// dueWake is the due timer's wake.
func (d *drain) dueWake() {
	d.dueMu.Lock()
	d.dueAt = time.Time{}
	d.dueMu.Unlock()
	d.wake()
}

// freeze freezes the due email intents into batches, when coalescing is on
// and a wake came since the last freeze.
func (d *drain) freeze(ctx context.Context) {
	if d.coalesce != nil {
		d.coalesce.freeze(ctx)
	}
}

// halt stops taking intents and waits for the sends in flight until ctx
// ends; then it cancels them (each goes back to pending, uncertain, and is
// sent again under its key) and waits for them to record that.
func (d *drain) halt(ctx context.Context) {
	if d.stop == nil {
		return
	}
	d.stop()
	if d.coalesce != nil {
		d.coalesce.stop()
	}
	d.dueMu.Lock()
	if d.due != nil {
		d.due.Stop()
	}
	d.dueMu.Unlock()
	finished := make(chan struct{})
	go func() { d.done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		d.cancel()
		<-finished
	}
	// What was claimed ahead and not taken goes back (bounded: a stop
	// that gave up waiting leaves it to the sweeper's rescue).
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	d.unclaimAhead(uctx)
	cancel()
	d.cancel()
}

// slot takes and sends one intent after another until ctx ends.
func (d *drain) slot(ctx context.Context) {
	// bulk says the slot's last intent was of a run: with none due
	// outside runs then (a claim takes those first), the next is likely of
	// a run too, and its token yields to the sends that are not.
	bulk := false
	for {
		gen, probe, err := d.gate.wait(ctx)
		if err != nil {
			return
		}
		// One of the worker's sends in flight, shared with its River jobs
		// (batches): Concurrency bounds them all.
		release, err := d.w.acquireSend(ctx)
		if err != nil {
			if probe {
				d.gate.again()
			}
			return
		}
		more := d.step(ctx, gen, probe, &bulk)
		release()
		if !more {
			return
		}
	}
}

// step is one pass of a slot through the gate: with a probe, a look for
// due intents first; then a token, a claim and its send. It returns false
// when ctx has ended.
func (d *drain) step(ctx context.Context, gen uint64, probe bool, bulk *bool) bool {
	w := d.w
	if probe {
		// A probe looks before it takes a token: an idle drain holds
		// none of the fleet's budget or quota. What it may batch it
		// freezes first: NextDue does not see intents held for that.
		// What comes due later wakes the drain then.
		d.freeze(ctx)
		due, next, later, err := d.look(ctx)
		if err == nil && later {
			d.wakeIn(next)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return false
		case err != nil:
			w.cfg.Logger.Warn("drain: cannot look for due intents", "error", err)
			d.connectionLost()
			d.gate.again()
			return sleepCtx(ctx, d.interval) == nil
		case !due:
			d.gate.shut(gen)
			return true
		}
	}
	leasedAt, token, err := d.token(ctx, *bulk)
	if err != nil {
		// The budget could not lease (the database is down, say): the
		// slot tries again after the interval, as a failed claim does;
		// only the end of ctx ends it.
		if probe {
			d.gate.again()
		}
		if ctx.Err() != nil {
			return false
		}
		w.cfg.Logger.Warn("drain: cannot take a token of the send budget", "error", err)
		return sleepCtx(ctx, d.interval) == nil
	}
	if !token && w.budget != nil {
		if probe {
			d.gate.again()
		}
		return true // waited for the budget as long as it asked
	}
	c, err := d.claim(ctx, token)
	if c == nil && token {
		w.budget.Return(1) // no request: the token is the fleet's again
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil:
		if !errors.Is(err, sendstate.ErrLeaseLost) {
			w.cfg.Logger.Warn("drain: claim failed", "error", err)
		}
		if probe {
			d.gate.again()
		}
		return sleepCtx(ctx, d.interval) == nil
	case c == nil && d.aheadLeft():
		// Nothing more due, but intents claimed ahead wait for slots:
		// the gate stays open until they are taken (shut, it left them
		// to expire, 2 s at the end of every backlog).
		if probe {
			d.gate.open()
		}
		return true
	case c == nil:
		d.gate.shut(gen)
		return true
	case probe:
		d.gate.open()
	}
	*bulk = c.RunKey != ""
	d.send(c, leasedAt, token)
	return true
}

// look is a probe's look at the tenants with intents pending (which the
// scheduler takes too): whether one is due and not held back by its
// limits, and if none is, how long until one comes due or its limits let
// it send (later false: none is pending).
func (d *drain) look(ctx context.Context) (due bool, next time.Duration, later bool, err error) {
	w := d.w
	now := time.Now()
	var ts []sendstate.DueTenant
	if w.batch != nil {
		ts, err = w.batch.look(ctx, w.queue, w.coalesceWait)
	} else { // tests that claim for the drain themselves
		ts, err = sendstate.DueTenants(ctx, w.pool, w.queue, w.coalesceWait, true)
	}
	if err != nil {
		return false, 0, false, err
	}
	d.fair.update(ts, now)
	for _, t := range ts {
		switch {
		case t.Due && t.Allow > 0:
			return true, 0, false, nil
		case t.Due:
			if !later || t.Wait < next {
				next, later = t.Wait, true
			}
		case t.Next != nil:
			if !later || *t.Next < next {
				next, later = *t.Next, true
			}
		}
	}
	return false, next, later, nil
}

// token waits for a token of the fleet's budget (none without a budget);
// a bulk one yields to the sends waiting that are not.
// When the budget names a later time, the slot sleeps until then and
// returns without one.
func (d *drain) token(ctx context.Context, bulk bool) (leasedAt time.Time, ok bool, err error) {
	b := d.w.budget
	if b == nil {
		return time.Time{}, false, nil
	}
	start := time.Now()
	d.waiting.Add(1)
	t, err := b.Acquire(ctx, maxBudgetWait, bulk)
	d.waiting.Add(-1)
	if err != nil {
		return time.Time{}, false, err
	}
	if !t.OK {
		d.w.cfg.Observer.Observe(Outcome{Result: ResultBudgetSnoozed, BudgetWait: time.Since(start)})
		return time.Time{}, false, sleepCtx(ctx, min(max(t.RetryIn, time.Second), d.w.cfg.MaxPause))
	}
	d.tokenTaken()
	d.w.cfg.Observer.Observe(Outcome{Result: ResultBudgetToken, BudgetWait: time.Since(start)})
	return t.LeasedAt, true, nil
}

// send makes the attempt of a claimed intent, as a job's send does, in a
// span of its own, bounded by the send timeout.
func (d *drain) send(c *sendstate.DrainClaim, leasedAt time.Time, token bool) {
	w, rec := d.w, c.Record
	if w.batch != nil { // nil in tests that claim for the drain themselves
		defer w.batch.flying.remove(rec.Key)
	}
	ctx, cancel := context.WithTimeout(d.work, d.timeout)
	defer cancel()
	ctx, span := w.tracer.Start(ctx, spanSend, trace.WithAttributes(attrKey.String(rec.Key), attrKind.String(string(rec.Kind))))
	a := &attempt{w: w, jobAttempt: c.Tries, claimedAt: time.Now(), bulk: c.RunKey != "", span: span,
		leasedAt: leasedAt, token: token, rateLimited: c.RateLimited, drained: true}
	err := a.run(ctx, &c.Claimed)
	endSend(span, err)
	if err != nil {
		d.release(rec.Key, c.Owner)
		return
	}
	w.recorded.Store(true)
}

// release makes sure an attempt that ended in an error did not leave its
// intent sending under this worker's claim: where the outcome could not be
// recorded (the database was down), the intent goes back to the drain
// (sendstate.ReleaseDrained), tried again every interval until the
// database answers. Where the outcome was recorded, the release changes
// nothing. A stop that gives up on it leaves the intent to RescueDrained,
// once this worker's lease has ended.
func (d *drain) release(key string, owner int32) {
	for {
		released, err := sendstate.ReleaseDrained(d.work, d.w.pool, key, owner)
		if err == nil {
			if released {
				d.wake()
				d.w.cfg.Logger.Warn("drain: the attempt's outcome was not recorded; the intent goes back to the queue, "+
					"to be sent again under its key", "key", key)
			}
			return
		}
		if sleepCtx(d.work, d.interval) != nil {
			return
		}
	}
}

// orphanAge is how long ago a claim must have been made before the sweeper
// takes it for an orphan (releaseOrphans): far longer than a claim takes
// from its commit to its hand-out.
const orphanAge = 10 * time.Second

// orphansWithin reports whether orphans may have come to be within the
// last d (see batcher.orphansAt): the only ways one does.
func (d *drain) orphansWithin(dur time.Duration) bool {
	b := d.w.batch
	if b == nil {
		return false
	}
	at := b.orphansAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < dur
}

// connectionLost tells the drain the database may have crashed: marks it
// acknowledged may be lost, and the orphans they leave are looked for.
// Any statement of the worker's that fails says so: through a pooler in
// transaction mode the worker's own connections outlive the server's, and
// only a statement sent while the server is down fails (the sweeper's, the
// drain's look, the lease's renewal).
func (d *drain) connectionLost() {
	if b := d.w.batch; b != nil {
		b.orphansAt.Store(time.Now().UnixNano())
	}
}

// releaseOrphans gives back the drained intents sending under this
// worker's claim that it does not have in flight: claims the database
// committed whose answer was lost with the connection (a database crash
// or restart), which no send of this worker will ever take up, while its
// lease, still held, keeps RescueDrained off them. Each is sent again
// under its key (sendstate.ReleaseOrphans).
func (d *drain) releaseOrphans(ctx context.Context) (int, error) {
	w := d.w
	if w.lease == nil || w.batch == nil {
		return 0, nil
	}
	owner, ok := w.lease.owner()
	if !ok {
		return 0, nil
	}
	n, err := sendstate.ReleaseOrphans(ctx, w.pool, owner, w.batch.flying.list(), orphanAge)
	if n > 0 {
		d.wake()
	}
	return n, err
}

// sleepCtx sleeps for d or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// gate holds the drain's slots while there is nothing due. Shut, it lets
// one slot through at each wake (a probe): only the probe takes a token of
// the fleet's budget and asks for a due intent, so an idle drain costs one
// token lent and given back, and one statement, per wake, whatever its
// Concurrency. A probe that finds an intent opens the gate for every slot;
// a slot that finds none shuts it again. Its generation grows at each wake,
// so a slot shuts it only if no wake came since that slot passed it (a row
// announced while the claim ran is not missed: another probe goes).
type gate struct {
	mu     sync.Mutex
	opened chan struct{} // closed while open
	isOpen bool
	gen    uint64
	probe  chan struct{} // one probe's pass while shut
}

// init shuts the gate with a probe waiting: the first slot looks.
func (g *gate) init() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opened = make(chan struct{})
	g.probe = make(chan struct{}, 1)
	g.probe <- struct{}{}
}

// wait returns when the slot may go, with the generation it went at, and
// whether it goes as the probe of a shut gate.
func (g *gate) wait(ctx context.Context) (gen uint64, probe bool, err error) {
	g.mu.Lock()
	ch, pr := g.opened, g.probe
	g.mu.Unlock()
	select {
	case <-ch:
	case <-pr:
		probe = true
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen, probe, nil
}

// wake tells the slots there may be due intents: a shut gate lets a probe
// through.
func (g *gate) wake() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened == nil {
		return // not started
	}
	g.gen++
	if !g.isOpen {
		select {
		case g.probe <- struct{}{}:
		default:
		}
	}
}

// again lets another probe through a shut gate: the probe that went could
// not look (no token yet, or its claim failed).
func (g *gate) again() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.isOpen {
		select {
		case g.probe <- struct{}{}:
		default:
		}
	}
}

// open lets every slot through: a probe found a due intent.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.isOpen {
		g.isOpen = true
		close(g.opened)
	}
}

// shut closes the gate after a slot that went at generation gen found
// nothing due; if a wake came since, a probe goes again instead.
func (g *gate) shut(gen uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.isOpen {
		g.isOpen = false
		g.opened = make(chan struct{})
	}
	if g.gen != gen {
		select {
		case g.probe <- struct{}{}:
		default:
		}
	}
}
