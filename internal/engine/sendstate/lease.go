package sendstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	var l Lease
	// The notice tells the fleet's sweeper of a new lease, whose end it
	// then times a sweep for (LeaseLook.NextEnd).
	err := db.QueryRow(ctx, `WITH n AS (SELECT nextval('sendonce_worker_id_seq')::int4 AS v), t AS (
		INSERT INTO sendonce_worker AS w (id, epoch, host, pid, river_client_id, lease_until)
		SELECT coalesce(nullif($1::int4, 0), n.v), n.v, $2, $3, nullif($4, ''), now() + $5::float8 * interval '1 second' FROM n
		ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch, host = excluded.host, pid = excluded.pid,
			river_client_id = excluded.river_client_id, renewed_at = now(), lease_until = excluded.lease_until,
			ended_at = NULL, end_reason = NULL
		RETURNING w.id, w.epoch)
		SELECT t.id, t.epoch FROM t, LATERAL (SELECT pg_notify('`+NotifyChannel+`', '`+LeaseNotice+`')) notice`,
		prev.ID, h.Host, h.PID, h.RiverClientID, length.Seconds()).Scan(&l.ID, &l.Epoch)
	if err != nil {
		return Lease{}, fmt.Errorf("sendstate: take a worker lease: %w", err)
	}
	return l, nil
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
// and says whether it is the fleet's sweeper, in one statement. A lease
// past its end that no sweeper has ended yet is renewed: nobody took
// anything from it.
func Renew(ctx context.Context, db DB, l Lease, length time.Duration) (Renewal, error) {
	var takeover *float64
	var async string
	// The renewal's commit does not wait for its WAL to reach the disk
	// (synchronous_commit off, for this transaction alone): a renewal a
	// second waiting for a flush each was most of an idle worker's cost to
	// the database. A renewal lost with a crash of the server ends no
	// lease: none is ended within the restart grace after the server's
	// start (ExpireLeases), and live workers renew within it.
	err := db.QueryRow(ctx, `WITH r AS (
			UPDATE sendonce_worker SET renewed_at = now(), lease_until = now() + $3::float8 * interval '1 second'
			WHERE id = $1 AND epoch = $2 AND ended_at IS NULL
			RETURNING id)
		SELECT (SELECT extract(epoch FROM min(w.lease_until) - now())::float8 FROM sendonce_worker w
			WHERE w.id < r.id AND w.ended_at IS NULL AND w.lease_until > now()),
			set_config('synchronous_commit', 'off', true)
		FROM r`, l.ID, l.Epoch, length.Seconds()).Scan(&takeover, &async)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Renewal{}, nil
	case err != nil:
		return Renewal{}, fmt.Errorf("sendstate: renew worker lease %d: %w", l.ID, err)
	case takeover == nil:
		return Renewal{Held: true, Sweeper: true}, nil
	}
	return Renewal{Held: true, Takeover: time.Duration(*takeover * float64(time.Second))}, nil
}

// LeaseNotice is the payload of the notification on NotifyChannel that
// TakeLease and ReleaseLease send: a lease began or ended, and the fleet's
// sweeper looks at the leases at once.
const LeaseNotice = "lease"

// ReleaseLease ends the lease at once ('stopped'): the worker is stopping,
// and whatever it leaves sending goes to other workers at once (the
// sweeper hears of it: LeaseNotice) instead of after the lease.
func ReleaseLease(ctx context.Context, db DB, l Lease) error {
	if _, err := db.Exec(ctx, `WITH r AS (
			UPDATE sendonce_worker SET ended_at = now(), end_reason = 'stopped', lease_until = least(lease_until, now())
			WHERE id = $1 AND epoch = $2 AND ended_at IS NULL RETURNING id)
		SELECT pg_notify('`+NotifyChannel+`', '`+LeaseNotice+`') FROM r`, l.ID, l.Epoch); err != nil {
		return fmt.Errorf("sendstate: release worker lease %d: %w", l.ID, err)
	}
	return nil
}

// LeaseHeld reports whether the lease of epoch is held.
func LeaseHeld(ctx context.Context, db DB, epoch int32) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, `SELECT `+held("$1::int4"), epoch).Scan(&ok); err != nil {
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
	tag, err := o.Pool.Exec(ctx, `UPDATE sendonce_worker SET ended_at = now(), end_reason = 'lapsed'
		WHERE ended_at IS NULL AND lease_until < now() AND now() - pg_postmaster_start_time() > $1::float8 * interval '1 second'`,
		restartGrace.Seconds())
	if err != nil {
		return 0, fmt.Errorf("sendstate: expire worker leases: %w", err)
	}
	if _, err := o.Pool.Exec(ctx, `DELETE FROM sendonce_worker WHERE ended_at < now() - interval '1 day'`); err != nil {
		return 0, fmt.Errorf("sendstate: forget ended worker leases: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// ForgetEndedLeases deletes the leases that ended a day ago: nothing
// reads them after that (ExpireLeases does it too).
func (o *Scheduler) ForgetEndedLeases(ctx context.Context) error {
	if _, err := o.Pool.Exec(ctx, `DELETE FROM sendonce_worker WHERE ended_at < now() - interval '1 day'`); err != nil {
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
	var (
		look LeaseLook
		last *time.Time
		next *float64
	)
	// The subqueries read the snapshot from before e's update: a lease e
	// ends is past its end there, so none of them reads it as held.
	err := o.Pool.QueryRow(ctx, `WITH e AS (
			UPDATE sendonce_worker SET ended_at = now(), end_reason = 'lapsed'
			WHERE ended_at IS NULL AND lease_until < now() AND now() - pg_postmaster_start_time() > $1::float8 * interval '1 second'
			RETURNING ended_at)
		SELECT (SELECT count(*) FROM e)::int, greatest((SELECT max(ended_at) FROM e), (SELECT max(ended_at) FROM sendonce_worker)),
			(SELECT extract(epoch FROM min(w.lease_until) - now())::float8 FROM sendonce_worker w
				WHERE w.ended_at IS NULL AND w.lease_until >= now() AND w.id <> $2),
			(SELECT count(*) FROM sendonce_worker w WHERE w.ended_at IS NULL AND w.lease_until < now()) > (SELECT count(*) FROM e)`,
		restartGrace.Seconds(), self).Scan(&look.Expired, &last, &next, &look.Overdue)
	if err != nil {
		return LeaseLook{}, fmt.Errorf("sendstate: expire worker leases: %w", err)
	}
	if last != nil {
		look.LastEnded = *last
	}
	if next != nil {
		look.NextEnd = time.Duration(*next * float64(time.Second))
	}
	return look, nil
}

// held is the SQL condition that the lease whose epoch is the int4
// expression epoch is held. Leases are this database's rows, so a worker
// of another database on the server proves nothing here.
func held(epoch string) string {
	return `EXISTS (SELECT 1 FROM sendonce_worker w WHERE w.epoch = ` + epoch + ` AND w.ended_at IS NULL)`
}

// owned is the SQL condition that the row aliased alias may be recorded by
// the owner whose epoch is the int4 expression owner: its claim is the
// owner's (claimed_by) and the owner's lease is held. Owner 0 is a send
// without a lease (a River client of the application's own), unfenced.
//
// A row locked and changed by a rescue is checked again on its new version
// by PostgreSQL before it is updated, so a record racing the rescue that
// hands the row on sees claimed_by cleared and records nothing.
func owned(alias, owner string) string {
	return `(` + owner + ` = 0 OR (` + alias + `.claimed_by = ` + owner + ` AND ` + held(owner) + `))`
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
	rows, err := db.Query(ctx, `SELECT w.id, w.epoch, w.host, w.pid, coalesce(w.river_client_id, ''),
			w.started_at, w.renewed_at, w.lease_until,
			CASE WHEN w.ended_at IS NOT NULL THEN w.end_reason WHEN w.lease_until > now() THEN 'held' ELSE 'overdue' END,
			w.ended_at IS NULL AND w.river_client_id IS NOT NULL AND EXISTS (SELECT 1 FROM river_leader l
				WHERE l.leader_id = w.river_client_id AND l.expires_at > now())
		FROM sendonce_worker w ORDER BY w.ended_at IS NOT NULL, w.started_at DESC, w.id DESC`)
	if err != nil {
		return nil, fmt.Errorf("sendstate: list workers: %w", err)
	}
	defer rows.Close()
	var out []WorkerLease
	for rows.Next() {
		var w WorkerLease
		if err := rows.Scan(&w.ID, &w.Epoch, &w.Host, &w.PID, &w.RiverClientID, &w.StartedAt, &w.RenewedAt, &w.LeaseUntil,
			&w.State, &w.Leader); err != nil {
			return nil, fmt.Errorf("sendstate: list workers: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sendstate: list workers: %w", err)
	}
	return out, nil
}
