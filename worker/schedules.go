package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/base/cronspec"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// Occurrence is one occurrence of a schedule: the run it creates.
type Occurrence struct {
	// Schedule is the schedule's name.
	Schedule string
	// RunKey is the key of the run the occurrence creates: the schedule's
	// name and At in UTC (cronspec.RunKey). Derive the members'
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
	// logger reports a schedule's failures (once each) and recoveries.
	logger *slog.Logger
	// next is when the first of the schedules this worker ticks comes due
	// (or its retry does), by this process's clock, as the last look saw
	// it (zero: none, or not looked yet).
	next time.Time
}

// due reports whether a schedule this worker ticks has come due since the
// last look (see look).
func (t *ticker) due() bool {
	return !t.next.IsZero() && !time.Now().Before(t.next)
}

// timed ticks if a schedule is due, as one look finds, and then looks for
// the next due time: a sweep with nothing due costs one statement, and a
// schedule fires at its time, since the sweeper sweeps at the next due
// time it knows of (or at its net, for a schedule written since).
func (t *ticker) timed(ctx context.Context) (int, error) {
	if t.now != nil {
		return t.tick(ctx) // a test's clock: the database's cannot say when
	}
	in, err := t.look(ctx)
	if err != nil || in > 0 {
		return 0, err
	}
	n, err := t.tick(ctx)
	if err != nil {
		return n, err
	}
	_, err = t.look(ctx)
	return n, err
}

// look reads how long until the first of the schedules this worker ticks
// comes due (or its retry), by the database's clock, and keeps when that
// is in next; with none, next is zero (the sweeper's net looks again).
func (t *ticker) look(ctx context.Context) (time.Duration, error) {
	names := make([]string, 0, len(t.producers))
	for name := range t.producers {
		names = append(names, name)
	}
	in, err := store.WorkerScheduleDueIn(ctx, t.pool, names)
	if err != nil {
		t.next = time.Time{}
		return 0, fmt.Errorf("worker: look for due schedules: %w", err)
	}
	if in == nil {
		t.next = time.Time{}
		return time.Hour, nil
	}
	d := time.Duration(*in * float64(time.Second))
	t.next = time.Now().Add(max(d, 0) + scheduleMargin)
	return d, nil
}

// scheduleMargin is how long after a schedule's due time, as the database
// reported it, the sweep timed for it ticks, so that the database's clock
// has passed it too.
const scheduleMargin = 10 * time.Millisecond

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

// due is a due schedule, as tickOne reads it.
type due struct {
	name, spec, producer, statement string
	missed                          outbox.Missed
	nextAt                          time.Time
	failures                        int
	lastError                       string
}

// tickOne handles one due schedule: it locks it (SKIP LOCKED, so workers
// ticking at once take different ones), creates the run of its latest due
// occurrence unless that run exists or the policy skips it, and moves it to
// its next occurrence after now, all in one transaction. done is true when
// no schedule was due.
//
// A schedule whose occurrence cannot be created (its statement errors, its
// producer fails, its spec no longer parses) keeps its occurrence due, gets
// the failure recorded on it and is passed over until a backoff has passed
// (retry_at). Before issue 22 the tick stopped at the error, so the earliest
// due schedule, failing, starved every healthy one after it, on every tick.
func (t *ticker) tickOne(ctx context.Context, producers []string) (done, made bool, err error) {
	var clock *time.Time
	if t.now != nil {
		c := t.now()
		clock = &c
	}
	var s due
	var now time.Time
	var taken bool // s was read and locked
	var failed *scheduleFailure
	err = pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		row, at, err := store.WorkerTakeDueSchedule(ctx, tx, producers, clock)
		if errors.Is(err, pgx.ErrNoRows) {
			done = true
			return nil
		}
		if err != nil {
			return err
		}
		s = due{name: row.Name, spec: row.Spec, producer: row.Producer, statement: row.Statement,
			missed: outbox.Missed(row.Missed), nextAt: row.NextAt, failures: row.Failures, lastError: row.LastError}
		now = at
		taken = true
		var runKey string
		var next time.Time
		// A savepoint: a failing statement or producer leaves the
		// transaction usable, to record the failure under the row's lock.
		err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			runKey, next, made, err = t.occur(ctx, sp, s, now)
			return err
		})
		if err != nil {
			made = false
			if ctx.Err() != nil {
				return err
			}
			failed, err = recordFailure(ctx, tx, s, now, err)
			return err
		}
		return store.WorkerScheduleAdvance(ctx, tx, s.name, next, made, runKey)
	})
	if err != nil {
		failed, made = nil, false // nothing of the transaction was committed
		if !taken || ctx.Err() != nil {
			return done, false, err
		}
		// The transaction itself failed once the schedule was taken (its
		// commit, say): record that in one of its own, or the schedule
		// would be taken again at once, and fail again, on every tick.
		if failed, err = t.recordApart(ctx, s, now, err); err != nil {
			return done, false, err
		}
	}
	t.report(s, failed, made)
	return done, made, nil
}

// recordApart is recordFailure in a transaction of its own, unless another
// worker took the schedule meanwhile (then it returns cause, unrecorded).
func (t *ticker) recordApart(ctx context.Context, s due, now time.Time, cause error) (*scheduleFailure, error) {
	var failed *scheduleFailure
	err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		failures, lastError, err := store.WorkerRetakeSchedule(ctx, tx, s.name, s.nextAt, now)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		s.failures, s.lastError = failures, lastError
		failed, err = recordFailure(ctx, tx, s, now, cause)
		return err
	})
	switch {
	case err != nil:
		return nil, errors.Join(cause, err)
	case failed == nil:
		return nil, fmt.Errorf("schedule %q: %w", s.name, cause)
	}
	return failed, nil
}

// occur creates the run of s's latest due occurrence unless that run exists
// or the policy skips it, and returns the run's key, the next occurrence
// after now and whether the run was created.
func (t *ticker) occur(ctx context.Context, tx pgx.Tx, s due, now time.Time) (runKey string, next time.Time, made bool, err error) {
	sched, err := cronspec.Parse(s.spec)
	if err != nil {
		return "", time.Time{}, false, err
	}
	// The latest occurrence due: one run for a spell without workers.
	at := s.nextAt
	for i := 0; i < maxCatchUp; i++ {
		n := sched.Next(at)
		if n.IsZero() || n.After(now) {
			break
		}
		at = n
	}
	next = sched.Next(now)
	if next.IsZero() {
		// Stored next_at would be the zero time, due for ever: a hot loop.
		return "", time.Time{}, false, fmt.Errorf("spec %q has no occurrence after %s", s.spec, now.UTC().Format(time.RFC3339))
	}
	runKey = cronspec.RunKey(s.name, at)
	if s.missed == outbox.MissedLate || now.Sub(at) < cronspec.MissedGrace {
		if made, err = t.create(ctx, tx, s.name, s.producer, s.statement, Occurrence{Schedule: s.name, RunKey: runKey, At: at}); err != nil {
			return "", time.Time{}, false, fmt.Errorf("occurrence %s: %w", at.UTC().Format(time.RFC3339), err)
		}
	}
	return runKey, next, made, nil
}

// scheduleFailure is a failure recordFailure wrote, for report.
type scheduleFailure struct {
	err      string
	failures int
	retryAt  time.Time
	new      bool // the first in a row, or another error than the last
}

// The backoff of a failing schedule: 10 s after its first failure in a row,
// doubling, at most 10 minutes, so a broken statement costs a try now and
// then, not one every tick, and a fixed one resumes within minutes.
const (
	scheduleBackoffMin = 10 * time.Second
	scheduleBackoffMax = 10 * time.Minute
)

// scheduleBackoff is the wait after the nth failure in a row.
func scheduleBackoff(n int) time.Duration {
	d := scheduleBackoffMin
	for i := 1; i < n && d < scheduleBackoffMax; i++ {
		d *= 2
	}
	return min(d, scheduleBackoffMax)
}

// maxScheduleError bounds the error text stored on a schedule.
const maxScheduleError = 2000

// recordFailure records on the schedule, locked in tx, that its occurrence
// failed with cause: its due occurrence stays as it is, to be tried again
// at retry_at.
func recordFailure(ctx context.Context, tx pgx.Tx, s due, now time.Time, cause error) (*scheduleFailure, error) {
	msg := strings.ToValidUTF8(cause.Error(), "?")
	if len(msg) > maxScheduleError {
		msg = strings.ToValidUTF8(msg[:maxScheduleError], "") + "…"
	}
	f := &scheduleFailure{err: msg, failures: s.failures + 1, new: s.failures == 0 || s.lastError != msg}
	f.retryAt = now.Add(scheduleBackoff(f.failures))
	if err := store.WorkerScheduleFailed(ctx, tx, s.name, f.failures, f.err, now, f.retryAt); err != nil {
		return nil, fmt.Errorf("schedule %q: record its failure (%v): %w", s.name, cause, err)
	}
	return f, nil
}

// report logs what tickOne committed for s: a failure once (the first in a
// row, or when the error changes; the schedule's row keeps the count and
// the last error), and the success that ends a spell of them.
func (t *ticker) report(s due, failed *scheduleFailure, made bool) {
	logger := t.logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case failed != nil && failed.new:
		logger.Warn("schedules: cannot create a schedule's occurrence; it is tried again after a backoff, the other schedules go on",
			"schedule", s.name, "error", failed.err, "failures", failed.failures, "retry_at", failed.retryAt.UTC().Format(time.RFC3339))
	case failed != nil:
		logger.Debug("schedules: a schedule's occurrence failed again",
			"schedule", s.name, "failures", failed.failures, "retry_at", failed.retryAt.UTC().Format(time.RFC3339))
	case s.failures > 0:
		logger.Info("schedules: a failing schedule works again", "schedule", s.name, "failures", s.failures, "created", made)
	}
}

// create makes the occurrence's run and its members, unless the run is
// there already.
func (t *ticker) create(ctx context.Context, tx pgx.Tx, name, producer, statement string, occ Occurrence) (bool, error) {
	created, err := store.WorkerCreateRun(ctx, tx, occ.RunKey, name, occ.At)
	if err != nil || !created {
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
