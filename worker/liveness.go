package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// liveness is a worker instance's proof of life: a lease row in
// sendonce_worker that it renews every beat, each renewal one short
// statement on any pooled connection, so it works through a
// transaction-mode pooler and under idle_session_timeout (the session
// advisory lock it replaces lived on whatever server connection a pooler
// gave it, and outlived the worker behind PgBouncer).
//
// Every claim records the lease's epoch (the fencing token) and every
// record checks it: once a sweeper has ended the lease, this instance
// records nothing for the intents it claimed under it, which are other
// jobs' then. The lease's end is the database's clock; the instance also
// keeps its own count on the monotonic clock, and when it has not renewed
// within nine tenths of the lease (the database unreachable, the process
// paused) it stops: the sends in flight under the lease are cancelled and
// no claim is made until a renewal succeeds. A renewal that finds the lease
// ended takes a new epoch, so what this instance claims next is its own
// again, and what it claimed before is no longer: never two sends of one
// intent at once.
//
// Each renewal also says whether this instance is the fleet's sweeper (the
// lowest id among the held leases; see sendstate.Renewal), which the
// sweeper reads (sweeps). One that is not renews again just after the
// lower leases would end unrenewed, not a beat later, so that it takes
// over from a dead sweeper as soon as that lease's end has passed.
type liveness struct {
	pool   *pgxpool.Pool
	length time.Duration // the lease
	beat   time.Duration // between renewals
	logger *slog.Logger
	holder sendstate.Holder

	mu    sync.Mutex
	lease sendstate.Lease
	// valid says the lease is held as far as this process knows: renewed
	// less than until ago on the monotonic clock.
	valid bool
	until time.Time
	// ctx ends when the current epoch stops being valid.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// sweeper says the last renewal found this instance the fleet's
	// sweeper; a lease just taken is one until its first renewal says
	// otherwise, so that a worker alone sweeps from its start.
	sweeper bool
	// takeover is when the lower leases end unless renewed, by this
	// process's clock, as of the last renewal (zero: none lower).
	takeover time.Time
	// promoted, when set, is called when a renewal finds this instance
	// the fleet's sweeper and the one before did not: the sweeper sweeps
	// at once, to end the dead sweeper's lease and rescue what it left.
	promoted func()
	// troubled, when set, is called when a renewal fails: the database
	// may be down, or back from a crash (see drain.connectionLost).
	troubled func()
	// report, when set, returns what a renewal records of the worker's
	// claims by tenant (nil: nothing new; see recentClaims.report).
	report func(time.Time) []byte
}

// errLeaseStopped is the cause of the sends cut off by the lease.
var errLeaseStopped = fmt.Errorf("worker: %w", sendstate.ErrLeaseLost)

func newLiveness(pool *pgxpool.Pool, length time.Duration, logger *slog.Logger) *liveness {
	host, _ := os.Hostname()
	return &liveness{pool: pool, length: length, beat: length / renewalsPerLease, logger: logger,
		holder: sendstate.Holder{Host: host, PID: os.Getpid()}}
}

// start takes a fresh id and its first lease.
func (l *liveness) start(ctx context.Context, riverClientID string) error {
	l.holder.RiverClientID = riverClientID
	at := time.Now()
	lease, err := sendstate.TakeLease(ctx, l.pool, sendstate.Lease{}, l.holder, l.length)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(lease, at)
	l.sweeper, l.takeover = true, time.Time{}
	return nil
}

// setLocked makes lease, taken or renewed by a statement sent at at, the
// current one.
func (l *liveness) setLocked(lease sendstate.Lease, at time.Time) {
	if l.ctx == nil || l.lease != lease || !l.valid {
		if l.cancel != nil {
			l.cancel(errLeaseStopped)
		}
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
	}
	l.lease, l.valid, l.until = lease, true, at.Add(l.length*9/10)
}

// renewalsPerLease is how many times a worker renews its lease within the
// lease's length: a renewal a second with the default lease, and a lease
// kept through renewals that fail for most of it (the fence stops the
// sends at nine tenths of the lease after the last renewal that went
// through, whatever the beat).
const renewalsPerLease = 3

// leaseID is the id of this instance's lease (the same for its life).
func (l *liveness) leaseID() int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease.ID
}

// sweeps reports whether this instance is the fleet's sweeper, as of its
// last renewal.
func (l *liveness) sweeps() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sweeper
}

// takeoverMargin is how long after the lower leases' end a worker that is
// not the sweeper renews, to find whether it is now.
const takeoverMargin = 50 * time.Millisecond

// next is how long until the next renewal: a beat, or less when the lower
// leases end within it (a sweeper that died: see sendstate.Renewal).
func (l *liveness) next() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.beat
	// A takeover passed already is of a renewal that failed since: the
	// beat, not a renewal every margin while the database is away.
	if until := time.Until(l.takeover); !l.sweeper && until > 0 {
		d = min(d, until+takeoverMargin)
	}
	return d
}

// owner is the epoch to claim under, or ok false while the lease is not
// known to be held.
func (l *liveness) owner() (epoch int32, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.valid || !time.Now().Before(l.until) {
		return 0, false
	}
	return l.lease.Epoch, true
}

// bind returns ctx, cancelled too when the lease of epoch stops being
// valid, and the func that releases it.
func (l *liveness) bind(ctx context.Context, epoch int32) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(ctx)
	l.mu.Lock()
	lctx, current := l.ctx, l.valid && l.lease.Epoch == epoch
	l.mu.Unlock()
	if !current {
		cancel(errLeaseStopped)
		return c, func() {}
	}
	stop := context.AfterFunc(lctx, func() { cancel(errLeaseStopped) })
	return c, func() { stop(); cancel(nil) }
}

// run renews the lease every beat until ctx ends, and stops the sends when
// it goes unrenewed past its local end.
func (l *liveness) run(ctx context.Context) {
	t := time.NewTimer(l.beat)
	defer t.Stop()
	watchdog := time.NewTimer(l.length)
	defer watchdog.Stop()
	for {
		l.mu.Lock()
		d := time.Until(l.until)
		if !l.valid {
			d = l.length // stopped already: the next renewal decides
		}
		l.mu.Unlock()
		watchdog.Reset(d)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.renew(ctx)
			t.Reset(l.next())
		case <-watchdog.C:
			l.expire()
		}
	}
}

// expire stops the current epoch's sends if it went unrenewed past its
// local end.
func (l *liveness) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.valid || time.Now().Before(l.until) {
		return
	}
	l.valid = false
	l.cancel(errLeaseStopped)
	l.logger.Warn("worker: lease not renewed in time (the database unreachable, or this process paused); "+
		"its sends in flight stop and nothing is claimed until it is renewed", "worker_id", l.lease.ID, "epoch", l.lease.Epoch, "lease", l.length)
}

func (l *liveness) renew(ctx context.Context) {
	l.mu.Lock()
	lease := l.lease
	l.mu.Unlock()
	at := time.Now()
	rctx, cancel := context.WithTimeout(ctx, l.length/2)
	defer cancel()
	var report []byte
	if l.report != nil {
		report = l.report(at)
	}
	r, err := sendstate.Renew(rctx, l.pool, lease, l.length, report)
	if err != nil {
		if ctx.Err() == nil {
			l.logger.Warn("worker: cannot renew its lease yet", "error", err)
			if l.troubled != nil {
				l.troubled()
			}
		}
		return
	}
	held := r.Held
	if !held {
		// A new epoch sweeps until its first renewal says otherwise.
		r = sendstate.Renewal{Sweeper: true}
		l.logger.Warn("worker: lease lost: a sweeper found it lapsed and handed the intents claimed under it to other jobs; "+
			"their sends here stop and record nothing, and a new lease epoch is taken", "worker_id", lease.ID, "epoch", lease.Epoch)
		at = time.Now()
		if lease, err = sendstate.TakeLease(rctx, l.pool, lease, l.holder, l.length); err != nil {
			l.mu.Lock()
			if l.valid {
				l.valid = false
				l.cancel(errLeaseStopped)
			}
			l.mu.Unlock()
			l.logger.Warn("worker: cannot take a new lease yet", "error", err)
			return
		}
		l.logger.Info("worker: took a new lease epoch", "worker_id", lease.ID, "epoch", lease.Epoch)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.valid && held {
		l.logger.Info("worker: lease renewed; claiming again", "worker_id", lease.ID, "epoch", lease.Epoch)
	}
	l.setLocked(lease, at)
	if r.Sweeper != l.sweeper {
		l.logger.Debug("worker: sweeper role changed", "worker_id", lease.ID, "sweeper", r.Sweeper)
		if r.Sweeper && l.promoted != nil {
			l.promoted()
		}
	}
	l.sweeper, l.takeover = r.Sweeper, time.Time{}
	if !r.Sweeper {
		l.takeover = at.Add(r.Takeover)
	}
}

// release ends the lease at once (a graceful stop).
func (l *liveness) release(ctx context.Context) error {
	l.mu.Lock()
	lease := l.lease
	if l.cancel != nil {
		l.valid = false
		l.cancel(errLeaseStopped)
	}
	l.mu.Unlock()
	if lease.ID == 0 {
		return nil
	}
	return sendstate.ReleaseLease(ctx, l.pool, lease)
}
