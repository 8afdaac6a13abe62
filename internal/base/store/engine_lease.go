package store

import (
	"context"
	"time"
)

// The worker instances' leases (sendonce_worker), as the worker's engine
// (internal/engine/sendstate) takes, renews, ends and reads them, and the
// conditions the claims and records put on them (held, owned).

// LeaseNotice is the payload of the notification on NotifyChannel that
// TakeLease and ReleaseLease send: a lease began or ended.
const LeaseNotice = "lease"

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

// takeLeaseSQL is TakeLease's statement. The notice tells the fleet's
// sweeper of a new lease.
const takeLeaseSQL = `WITH n AS (SELECT nextval('sendonce_worker_id_seq')::int4 AS v), t AS (
		INSERT INTO sendonce_worker AS w (id, epoch, host, pid, river_client_id, lease_until)
		SELECT coalesce(nullif($1::int4, 0), n.v), n.v, $2, $3, nullif($4, ''), now() + $5::float8 * interval '1 second' FROM n
		ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch, host = excluded.host, pid = excluded.pid,
			river_client_id = excluded.river_client_id, renewed_at = now(), lease_until = excluded.lease_until,
			ended_at = NULL, end_reason = NULL
		RETURNING w.id, w.epoch)
		SELECT t.id, t.epoch FROM t, LATERAL (SELECT pg_notify('` + NotifyChannel + `', '` + LeaseNotice + `')) notice`

// TakeLease takes a lease of the given length, by the database's clock,
// for a worker instance on host with pid and River client riverClientID
// ("": none): a new instance (prevID 0), or the instance prevID, which
// keeps its id and takes a new epoch. It returns the lease's id and epoch,
// and tells the sweeper (LeaseNotice). One statement.
func TakeLease(ctx context.Context, db DB, prevID int32, host string, pid int, riverClientID string, length time.Duration) (id, epoch int32, err error) {
	err = db.QueryRow(ctx, takeLeaseSQL, prevID, host, pid, riverClientID, length.Seconds()).Scan(&id, &epoch)
	return id, epoch, err
}

// renewLeaseSQL is RenewLease's statement. The renewal's commit does not
// wait for its WAL to reach the disk (synchronous_commit off, for this
// transaction alone): a renewal a second waiting for a flush each was most
// of an idle worker's cost to the database. A renewal lost with a crash of
// the server ends no lease: none is ended within the restart grace after
// the server's start (ExpireLeases), and live workers renew within it.
const renewLeaseSQL = `WITH r AS (
			UPDATE sendonce_worker SET renewed_at = now(), lease_until = now() + $3::float8 * interval '1 second',
				tenants = coalesce($4::jsonb, tenants)
			WHERE id = $1 AND epoch = $2 AND ended_at IS NULL
			RETURNING id)
		SELECT (SELECT extract(epoch FROM min(w.lease_until) - now())::float8 FROM sendonce_worker w
			WHERE w.id < r.id AND w.ended_at IS NULL AND w.lease_until > now()),
			set_config('synchronous_commit', 'off', true)
		FROM r`

// RenewLease extends the lease (id, epoch), unless it has ended, to length
// past now, by the database's clock, in one statement, and records
// tenants (a JSON object of tenant to intents claimed in the last minute)
// unless it is nil. ok is false when
// it has ended; lowerEnd is how long until the first of the held leases of
// lower id ends unless renewed (nil: none is held).
func RenewLease(ctx context.Context, db DB, id, epoch int32, length time.Duration, tenants []byte) (ok bool, lowerEnd *time.Duration, err error) {
	var takeover *float64
	var async string
	var report *string
	if tenants != nil {
		s := string(tenants)
		report = &s
	}
	err = db.QueryRow(ctx, renewLeaseSQL, id, epoch, length.Seconds(), report).Scan(&takeover, &async)
	switch {
	case engineNoRows(err):
		return false, nil, nil
	case err != nil:
		return false, nil, err
	case takeover != nil:
		d := engineSeconds(*takeover)
		lowerEnd = &d
	}
	return true, lowerEnd, nil
}

// releaseLeaseSQL is ReleaseLease's statement.
const releaseLeaseSQL = `WITH r AS (
			UPDATE sendonce_worker SET ended_at = now(), end_reason = 'stopped', lease_until = least(lease_until, now())
			WHERE id = $1 AND epoch = $2 AND ended_at IS NULL RETURNING id)
		SELECT pg_notify('` + NotifyChannel + `', '` + LeaseNotice + `') FROM r`

// ReleaseLease ends the lease (id, epoch) at once ('stopped'), unless it
// has ended, and tells the sweeper (LeaseNotice).
func ReleaseLease(ctx context.Context, db DB, id, epoch int32) error {
	_, err := db.Exec(ctx, releaseLeaseSQL, id, epoch)
	return err
}

// leaseHeldSQL is LeaseHeld's statement.
var leaseHeldSQL = `SELECT ` + held("$1::int4")

// LeaseHeld reports whether the lease of epoch is held.
func LeaseHeld(ctx context.Context, db DB, epoch int32) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, leaseHeldSQL, epoch).Scan(&ok)
	return ok, err
}

// expireLeasesSQL is ExpireLeases's statement.
const expireLeasesSQL = `UPDATE sendonce_worker SET ended_at = now(), end_reason = 'lapsed'
		WHERE ended_at IS NULL AND lease_until < now() AND now() - pg_postmaster_start_time() > $1::float8 * interval '1 second'`

// ExpireLeases ends ('lapsed') every lease whose end has passed by the
// database's clock, unless the database server started within
// restartGrace, and returns how many it ended.
func ExpireLeases(ctx context.Context, db DB, restartGrace time.Duration) (int, error) {
	tag, err := db.Exec(ctx, expireLeasesSQL,
		restartGrace.Seconds())
	return int(tag.RowsAffected()), err
}

// forgetEndedLeasesSQL is ForgetEndedLeases's statement.
const forgetEndedLeasesSQL = `DELETE FROM sendonce_worker WHERE ended_at < now() - interval '1 day'`

// ForgetEndedLeases deletes the leases that ended a day ago.
func ForgetEndedLeases(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, forgetEndedLeasesSQL)
	return err
}

// LeaseSweep is what ExpireLeasesAndLook found: how many leases it ended,
// when the last lease of all ended (nil: none has), how long until the
// first of the other held leases ends unless renewed (nil: none is held),
// and whether a lease is past its end and was not ended.
type LeaseSweep struct {
	Expired   int
	LastEnded *time.Time
	NextEnd   *time.Duration
	Overdue   bool
}

// expireAndLookSQL is ExpireLeasesAndLook's statement. The subqueries read
// the snapshot from before e's update: a lease e ends is past its end
// there, so none of them reads it as held.
const expireAndLookSQL = `WITH e AS (
			UPDATE sendonce_worker SET ended_at = now(), end_reason = 'lapsed'
			WHERE ended_at IS NULL AND lease_until < now() AND now() - pg_postmaster_start_time() > $1::float8 * interval '1 second'
			RETURNING ended_at)
		SELECT (SELECT count(*) FROM e)::int, greatest((SELECT max(ended_at) FROM e), (SELECT max(ended_at) FROM sendonce_worker)),
			(SELECT extract(epoch FROM min(w.lease_until) - now())::float8 FROM sendonce_worker w
				WHERE w.ended_at IS NULL AND w.lease_until >= now() AND w.id <> $2),
			(SELECT count(*) FROM sendonce_worker w WHERE w.ended_at IS NULL AND w.lease_until < now()) > (SELECT count(*) FROM e)`

// ExpireLeasesAndLook is ExpireLeases for the fleet's sweeper, whose lease
// id is self, without forgetting old leases, and a look at the leases, in
// one statement.
func ExpireLeasesAndLook(ctx context.Context, db DB, restartGrace time.Duration, self int32) (LeaseSweep, error) {
	var s LeaseSweep
	var next *float64
	if err := db.QueryRow(ctx, expireAndLookSQL, restartGrace.Seconds(), self).Scan(&s.Expired, &s.LastEnded, &next, &s.Overdue); err != nil {
		return LeaseSweep{}, err
	}
	if next != nil {
		d := engineSeconds(*next)
		s.NextEnd = &d
	}
	return s, nil
}

// WorkerRow is a worker instance's lease as ListWorkers reads it. State is
// the end reason of an ended lease ('lapsed', 'stopped'), else 'held' or
// 'overdue' (its end passed); Leader says its River client is River's
// leader now.
type WorkerRow struct {
	ID, Epoch     int32
	Host          string
	PID           int
	RiverClientID string
	StartedAt     time.Time
	RenewedAt     time.Time
	LeaseUntil    time.Time
	State         string
	Leader        bool
}

// listWorkersSQL is ListWorkers's statement.
const listWorkersSQL = `SELECT w.id, w.epoch, w.host, w.pid, coalesce(w.river_client_id, ''),
			w.started_at, w.renewed_at, w.lease_until,
			CASE WHEN w.ended_at IS NOT NULL THEN w.end_reason WHEN w.lease_until > now() THEN 'held' ELSE 'overdue' END,
			w.ended_at IS NULL AND w.river_client_id IS NOT NULL AND EXISTS (SELECT 1 FROM river_leader l
				WHERE l.leader_id = w.river_client_id AND l.expires_at > now())
		FROM sendonce_worker w ORDER BY w.ended_at IS NOT NULL, w.started_at DESC, w.id DESC`

// ListWorkers lists the worker instances' leases, held ones first, each
// group newest first.
func ListWorkers(ctx context.Context, db DB) ([]WorkerRow, error) {
	rows, err := db.Query(ctx, listWorkersSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []WorkerRow
	for rows.Next() {
		var w WorkerRow
		if err := rows.Scan(&w.ID, &w.Epoch, &w.Host, &w.PID, &w.RiverClientID, &w.StartedAt, &w.RenewedAt, &w.LeaseUntil,
			&w.State, &w.Leader); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
