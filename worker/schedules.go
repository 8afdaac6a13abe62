package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/outbox"
)

// Occurrence is one occurrence of a schedule: the run it creates.
type Occurrence struct {
	// Schedule is the schedule's name.
	Schedule string
	// RunKey is the key of the run the occurrence creates: the schedule's
	// name and At in UTC (outbox.OccurrenceRunKey). Derive the members'
	// keys from it.
	RunKey string
	// At is when the occurrence fell due.
	At time.Time
}

// Producer makes the members of one occurrence of a schedule that names it
// (outbox.Schedule.Producer). It runs in the occurrence's transaction, once
// per occurrence: read the application's tables through tx.
type Producer func(ctx context.Context, tx pgx.Tx, occ Occurrence) ([]outbox.Intent, error)

// ticker creates the due occurrences of schedules.
type ticker struct {
	pool      *pgxpool.Pool
	outbox    *outbox.Outbox
	producers map[string]Producer
	// now, when set, is the clock the tick reads instead of the database's
	// (tests walk a schedule through a night of clock changes with it).
	now func() time.Time
}

// maxCatchUp bounds the occurrences walked to find the latest one missed.
const maxCatchUp = 100_000

// tick creates every due occurrence it can, one transaction each, and
// returns how many runs it created. A schedule whose Go producer this
// worker does not have is left to a worker that has it.
func (t *ticker) tick(ctx context.Context) (int, error) {
	names := make([]string, 0, len(t.producers))
	for name := range t.producers {
		names = append(names, name)
	}
	created := 0
	for {
		done, made, err := t.tickOne(ctx, names)
		if made {
			created++
		}
		if err != nil || done {
			return created, err
		}
	}
}

// tickOne handles one due schedule: it locks it (SKIP LOCKED, so workers
// ticking at once take different ones), creates the run of its latest due
// occurrence unless that run exists or the policy skips it, and moves it to
// its next occurrence after now, all in one transaction. done is true when
// no schedule was due.
func (t *ticker) tickOne(ctx context.Context, producers []string) (done, made bool, err error) {
	var clock *time.Time
	if t.now != nil {
		c := t.now()
		clock = &c
	}
	err = pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		var name, spec, producer, statement string
		var missed outbox.Missed
		var nextAt, now time.Time
		err := tx.QueryRow(ctx, `SELECT name, spec, coalesce(producer, ''), coalesce(statement, ''), missed, next_at, coalesce($2, now())
			FROM sendonce_schedule WHERE next_at <= coalesce($2, now()) AND (producer IS NULL OR producer = ANY($1))
			ORDER BY next_at LIMIT 1 FOR UPDATE SKIP LOCKED`, producers, clock).
			Scan(&name, &spec, &producer, &statement, &missed, &nextAt, &now)
		if errors.Is(err, pgx.ErrNoRows) {
			done = true
			return nil
		}
		if err != nil {
			return err
		}
		sched, err := outbox.ParseSpec(spec)
		if err != nil {
			return fmt.Errorf("schedule %q: %w", name, err)
		}
		// The latest occurrence due: one run for a spell without workers.
		at := nextAt
		for i := 0; i < maxCatchUp; i++ {
			n := sched.Next(at)
			if n.IsZero() || n.After(now) {
				break
			}
			at = n
		}
		next := sched.Next(now)
		runKey := outbox.OccurrenceRunKey(name, at)
		if missed == outbox.MissedLate || now.Sub(at) < outbox.MissedGrace {
			if made, err = t.create(ctx, tx, name, producer, statement, Occurrence{Schedule: name, RunKey: runKey, At: at}); err != nil {
				return fmt.Errorf("schedule %q, occurrence %s: %w", name, at.UTC().Format(time.RFC3339), err)
			}
		}
		_, err = tx.Exec(ctx, `UPDATE sendonce_schedule SET next_at = $2,
			last_run = CASE WHEN $3 THEN $4 ELSE last_run END, updated_at = now() WHERE name = $1`,
			name, next, made, runKey)
		return err
	})
	return done, made, err
}

// create makes the occurrence's run and its members, unless the run is
// there already.
func (t *ticker) create(ctx context.Context, tx pgx.Tx, name, producer, statement string, occ Occurrence) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO sendonce_run (key, schedule_name, occurrence) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO NOTHING`, occ.RunKey, name, occ.At)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	if statement != "" {
		// $1 is the run's key and $2 the occurrence's time, for a statement
		// that uses them.
		var args []any
		switch {
		case strings.Contains(statement, "$2"):
			args = []any{occ.RunKey, occ.At}
		case strings.Contains(statement, "$1"):
			args = []any{occ.RunKey}
		}
		_, err := tx.Exec(ctx, statement, args...)
		return err == nil, err
	}
	intents, err := t.producers[producer](ctx, tx, occ)
	if err != nil {
		return false, fmt.Errorf("producer %q: %w", producer, err)
	}
	_, err = t.outbox.EnqueueRun(ctx, tx, outbox.Run{Key: occ.RunKey, Intents: intents})
	return err == nil, err
}
