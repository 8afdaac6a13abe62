package sendstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
)

// DefaultLease is how long a worker instance's lease lasts past its last
// heartbeat, by the database's clock. A worker renews it three times a
// lease (every second); the fleet's sweeper times a sweep for the end of
// the first lease that may lapse (LeaseLook.NextEnd), ends a lease past its
// end and hands the intents claimed under it to new jobs. After a SIGKILL
// the intents it cut off are therefore sent again within the lease, a few
// milliseconds and a send: 3 s + the send with default flags, and a free
// slot of the worker that sends them (measured by the integration suite's
// rescue-time scenario).
const DefaultLease = 3 * time.Second

// ErrLeaseLost is returned by a claim or a record made under a lease that
// is no longer held: it lapsed (the worker stopped renewing it long enough:
// paused, partitioned, slow, or the process is gone) and a sweeper ended
// it, handing the intents claimed under it to new jobs. Nothing is
// recorded: the intents are another job's now, and it sends them again
// under the same keys, so the API replays what was delivered.
var ErrLeaseLost = errors.New("sendstate: this worker's lease has ended (it was not renewed in time); " +
	"the intents claimed under it are other jobs' now, so nothing was recorded")

// Lease is a worker instance's hold on its claims: its id, for as long as
// the process lives, and the epoch of the lease it holds now, the fencing
// token every claim records in claimed_by and every record checks.
type Lease struct {
	ID    int32
	Epoch int32
}

// Holder describes the worker instance taking a lease, as the table
// sendonce_worker shows it.
type Holder struct {
	Host          string
	PID           int
	RiverClientID string
}

// TakeLease takes a lease of the given length for a worker instance: a new
// instance (prev.ID 0), or one whose lease was lost, which keeps its id and
// takes a new epoch. One statement.
func TakeLease(ctx context.Context, db DB, prev Lease, h Holder, length time.Duration) (Lease, error) {
	// The notice tells the fleet's sweeper of a new lease, whose end it
	// then times a sweep for (LeaseLook.NextEnd).
	id, epoch, err := store.TakeLease(ctx, db, prev.ID, h.Host, h.PID, h.RiverClientID, length)
	if err != nil {
		return Lease{}, fmt.Errorf("sendstate: take a worker lease: %w", err)
	}
	return Lease{ID: id, Epoch: epoch}, nil
}

// Renewal is what Renew found.
type Renewal struct {
	// Held is false when the lease has ended (a sweeper found it lapsed
	// and handed its intents on): the worker must stop what it sends under
	// it and take a new epoch (TakeLease).
	Held bool
	// Sweeper says the lease is the fleet's sweeper: the lowest id among
	// the held leases (not ended, their end ahead), this one renewed. A
	// lease past its end that no sweeper has ended yet does not count, so
	// when the sweeper's worker dies the next one takes over at its first
	// renewal after the dead lease's end, and ends that lease itself
	// (ExpireLeases).
	Sweeper bool
	// Takeover, when Held and not Sweeper, is how long until the first of
	// the lower held leases ends unless renewed, by the database's clock: a
	// renewal then finds whether the sweeper is gone.
	Takeover time.Duration
}

// Renew extends the lease to length past now, by the database's clock,
// and says whether it is the fleet's sweeper, in one statement; it
// records tenants, the worker's intents claimed in the last minute by
// tenant as a JSON object (sendonce_worker.tenants), unless it is nil. A lease
// past its end that no sweeper has ended yet is renewed: nobody took
// anything from it.
func Renew(ctx context.Context, db DB, l Lease, length time.Duration, tenants []byte) (Renewal, error) {
	// The renewal's commit does not wait for its WAL to reach the disk
	// (synchronous_commit off, for this transaction alone; see
	// store.RenewLease).
	held, takeover, err := store.RenewLease(ctx, db, l.ID, l.Epoch, length, tenants)
	switch {
	case err != nil:
		return Renewal{}, fmt.Errorf("sendstate: renew worker lease %d: %w", l.ID, err)
	case !held:
		return Renewal{}, nil
	case takeover == nil:
		return Renewal{Held: true, Sweeper: true}, nil
	}
	return Renewal{Held: true, Takeover: *takeover}, nil
}

// LeaseNotice is the payload of the notification on NotifyChannel that
// TakeLease and ReleaseLease send: a lease began or ended, and the fleet's
// sweeper looks at the leases at once.
const LeaseNotice = store.LeaseNotice

// ReleaseLease ends the lease at once ('stopped'): the worker is stopping,
// and whatever it leaves sending goes to other workers at once (the
// sweeper hears of it: LeaseNotice) instead of after the lease.
func ReleaseLease(ctx context.Context, db DB, l Lease) error {
	if err := store.ReleaseLease(ctx, db, l.ID, l.Epoch); err != nil {
		return fmt.Errorf("sendstate: release worker lease %d: %w", l.ID, err)
	}
	return nil
}

// LeaseHeld reports whether the lease of epoch is held.
func LeaseHeld(ctx context.Context, db DB, epoch int32) (bool, error) {
	ok, err := store.LeaseHeld(ctx, db, epoch)
	if err != nil {
		return false, fmt.Errorf("sendstate: read worker lease: %w", err)
	}
	return ok, nil
}

// ExpireLeases ends ('lapsed') every lease whose end has passed by the
// database's clock, so that RescueAbandoned and RescueAbandonedBatches hand
// the intents claimed under them to new jobs, and forgets the leases ended
// a day ago. Within restartGrace of the database server's start nothing is
// ended: heartbeats could not reach a server that was down, and live
// workers renew within a second of its return. It returns how many leases
// it ended.
func (o *Scheduler) ExpireLeases(ctx context.Context, restartGrace time.Duration) (int, error) {
	n, err := store.ExpireLeases(ctx, o.Pool, restartGrace)
	if err != nil {
		return 0, fmt.Errorf("sendstate: expire worker leases: %w", err)
	}
	if err := store.ForgetEndedLeases(ctx, o.Pool); err != nil {
		return 0, fmt.Errorf("sendstate: forget ended worker leases: %w", err)
	}
	return n, nil
}

// ForgetEndedLeases deletes the leases that ended a day ago: nothing
// reads them after that (ExpireLeases does it too).
func (o *Scheduler) ForgetEndedLeases(ctx context.Context) error {
	if err := store.ForgetEndedLeases(ctx, o.Pool); err != nil {
		return fmt.Errorf("sendstate: forget ended worker leases: %w", err)
	}
	return nil
}

// LeaseLook is what ExpireLeasesAndLook found.
type LeaseLook struct {
	// Expired is how many leases it ended.
	Expired int
	// LastEnded is when the last lease of all ended (zero when none has):
	// a later time than the sweeper saw before means some worker ended,
	// lapsed or stopped, since.
	LastEnded time.Time
	// NextEnd is how long until the first of the other held leases (all
	// but the caller's) ends unless it is renewed, by the database's
	// clock; zero when no other lease is held. A sweep then ends it, if
	// its worker died, without waiting for the next interval.
	NextEnd time.Duration
	// Overdue says some lease is past its end and was not ended (within
	// the restart grace): the sweeper looks again at its next interval.
	Overdue bool
}

// ExpireLeasesAndLook is ExpireLeases for the fleet's sweeper, whose lease
// id is self, which rescues only when a lease has ended: in one statement
// it ends the leases whose end has passed (as ExpireLeases, without
// forgetting the old ones), counts them, and reads when the last lease of
// all ended and when the first of the others ends unless renewed.
func (o *Scheduler) ExpireLeasesAndLook(ctx context.Context, restartGrace time.Duration, self int32) (LeaseLook, error) {
	s, err := store.ExpireLeasesAndLook(ctx, o.Pool, restartGrace, self)
	if err != nil {
		return LeaseLook{}, fmt.Errorf("sendstate: expire worker leases: %w", err)
	}
	look := LeaseLook{Expired: s.Expired, Overdue: s.Overdue}
	if s.LastEnded != nil {
		look.LastEnded = *s.LastEnded
	}
	if s.NextEnd != nil {
		look.NextEnd = *s.NextEnd
	}
	return look, nil
}

// WorkerLease is a worker instance's lease as an operator sees it (the
// outbox page's workers panel, say).
type WorkerLease struct {
	Lease
	Holder
	StartedAt  time.Time
	RenewedAt  time.Time
	LeaseUntil time.Time
	// State is LeaseStateHeld, LeaseStateOverdue, LeaseStateLapsed or LeaseStateStopped.
	State string
	// Leader says the instance's River client is River's leader now (it
	// runs River's maintenance, the rescuer among it).
	Leader bool
}

// The states of a WorkerLease.
const (
	LeaseStateHeld    = "held"    // renewed, its end ahead
	LeaseStateOverdue = "overdue" // its end passed, not yet ended by a sweeper: about to be taken over
	LeaseStateLapsed  = "lapsed"  // ended by a sweeper, its intents handed on
	LeaseStateStopped = "stopped" // ended by its worker's graceful stop
)

// Workers lists the worker instances' leases, held ones first, each
// group newest first; ended leases are kept a day.
func Workers(ctx context.Context, db DB) ([]WorkerLease, error) {
	rows, err := store.ListWorkers(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("sendstate: list workers: %w", err)
	}
	var out []WorkerLease
	for _, w := range rows {
		out = append(out, WorkerLease{Lease: Lease{ID: w.ID, Epoch: w.Epoch},
			Holder:    Holder{Host: w.Host, PID: w.PID, RiverClientID: w.RiverClientID},
			StartedAt: w.StartedAt, RenewedAt: w.RenewedAt, LeaseUntil: w.LeaseUntil, State: w.State, Leader: w.Leader})
	}
	return out, nil
}
