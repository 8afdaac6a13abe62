package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/sendstate"
)

// liveness is a worker instance's proof of life: a PostgreSQL session that
// holds the advisory lock (sendstate.OwnerLockClass, id) for as long as the
// process lives. Every claim records the id; when the process dies, even by
// SIGKILL, its session ends, the lock goes with it, and any worker's
// reconciler hands the intents it left sending to new jobs within a second
// or two, instead of after River's rescuer (minutes). Advisory locks, like
// the ids of sendonce_worker_id_seq, are the database's own: the rescue
// reads only this database's locks (sendstate's ownerAlive), so another
// database on the server with its own worker of the same id proves nothing
// about this one.
type liveness struct {
	pool     *pgxpool.Pool
	id       int32
	interval time.Duration
	logger   *slog.Logger
	conn     *pgx.Conn
}

// start takes a fresh id and its lock.
func (l *liveness) start(ctx context.Context) error {
	if err := l.pool.QueryRow(ctx, `SELECT nextval('sendonce_worker_id_seq')::int4`).Scan(&l.id); err != nil {
		return fmt.Errorf("worker: take an instance id: %w", err)
	}
	return l.lock(ctx)
}

// lock opens a connection of its own (never a pooled one, which would keep
// the lock after the pool reuses it) and takes the lock on it.
func (l *liveness) lock(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("worker: connect for the liveness lock: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, sendstate.OwnerLockClass, l.id).Scan(&ok); err != nil {
		conn.Close(ctx)
		return fmt.Errorf("worker: take the liveness lock: %w", err)
	}
	if !ok {
		conn.Close(ctx)
		return fmt.Errorf("worker: liveness lock %d is held by another session", l.id)
	}
	l.conn = conn
	return nil
}

// run keeps the lock until ctx ends: it checks the session every interval
// and, when it was lost (a database restart, a dropped connection), takes
// the lock again on a new one. Meanwhile the intents this instance is
// sending may be handed to other workers; their sends share the intent's
// key, so the API replays rather than repeats.
func (l *liveness) run(ctx context.Context) {
	defer func() {
		if l.conn != nil {
			l.conn.Close(context.WithoutCancel(ctx))
		}
	}()
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.conn != nil {
			if err := l.conn.Ping(ctx); err == nil {
				continue
			} else if ctx.Err() != nil {
				return
			} else {
				l.logger.Warn("worker: lost the liveness lock's session; taking the lock again", "error", err)
			}
			l.conn.Close(ctx)
			l.conn = nil
		}
		if err := l.lock(ctx); err != nil && ctx.Err() == nil {
			l.logger.Warn("worker: cannot take the liveness lock yet", "error", err)
		}
	}
}
