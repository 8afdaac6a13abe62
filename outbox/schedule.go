package outbox

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sendonce/sendonce/internal/base/cronspec"
	"github.com/sendonce/sendonce/internal/base/store"
)

// Schedule is a recurring run: every occurrence of Spec creates one run,
// keyed by the schedule's name and the occurrence's time in UTC
// (digest:2026-12-07T07:00:00Z), from a Go producer registered with the
// workers (worker.Config.Producers) or from a SQL statement. Running
// workers create due occurrences; an occurrence is created once, however
// many workers tick and whatever crashes.
type Schedule struct {
	// Name names the schedule: 1 to 100 letters, digits, "_", "." or "-".
	Name string `json:"name"`
	// Spec is when: five cron fields (minute hour day-of-month month
	// day-of-week), or six with seconds first, then optionally a time zone:
	// "0 8 * * MON Europe/Berlin". Without one, UTC. Descriptors such as
	// "@hourly" and "@every 10m" are accepted too. Each occurrence is a
	// wall-clock time in the zone, created once: on the day the clocks go
	// back over it, at its first instant; on the day they jump over it, at
	// the first instant after the jump (see internal/base/cronspec).
	Spec string `json:"spec"`
	// Producer names a Go producer registered with the workers, or
	// Statement is SQL run in the occurrence's transaction with $1 = the
	// run's key and $2 = the occurrence's time: an INSERT INTO
	// sendonce_outbox (idempotency_key, kind, payload, run_key) SELECT …
	// over the application's own tables, with keys derived from $1. One of
	// the two.
	Producer  string `json:"producer,omitempty"`
	Statement string `json:"statement,omitempty"`
	// Missed says what becomes of occurrences that fell due while no
	// worker ran: MissedLate (default) creates the latest of them once, late;
	// MissedSkip creates only those less than a minute late.
	Missed Missed `json:"missed"`
	// Topic is the topic of the runs it creates, and so of their members
	// (see Run.Topic); empty: none.
	Topic string `json:"topic,omitempty"`
	// Tenant is the tenant of the runs it creates, and so of their members
	// (see Run.Tenant); empty: the default tenant.
	Tenant string `json:"tenant,omitempty"`
	// NextAt is the next occurrence (read only).
	NextAt time.Time `json:"nextAt"`
	// LastRun is the key of the last run created (read only).
	LastRun string `json:"lastRun,omitempty"`
	// Failures counts the failed attempts at the due occurrence in a row
	// (read only): its statement or producer failed, or its run could not
	// be written. 0 once one succeeds.
	Failures int `json:"failures,omitempty"`
	// LastError is the last failed attempt's error, until one succeeds
	// (read only).
	LastError string `json:"lastError,omitempty"`
	// FailedAt is when it failed, and RetryAt when the workers try the
	// occurrence again (read only; nil when healthy).
	FailedAt *time.Time `json:"failedAt,omitempty"`
	RetryAt  *time.Time `json:"retryAt,omitempty"`
}

// Missed is a Schedule's policy for occurrences missed while no worker ran.
type Missed string

// The policies for missed occurrences.
const (
	MissedLate Missed = "late"
	MissedSkip Missed = "skip"
)

var scheduleNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

// SaveSchedule creates or replaces a schedule. Its next occurrence is the
// first after now; runs already created are left as they are. Replacing a
// failing schedule clears its failures.
func (o *Outbox) SaveSchedule(ctx context.Context, s Schedule) (*Schedule, error) {
	if !scheduleNamePattern.MatchString(s.Name) {
		return nil, invalid("name", fmt.Sprintf(
			"%q: want 1 to 100 letters, digits, \"_\", \".\" and \"-\"", shorten(s.Name)))
	}
	sched, err := cronspec.Parse(s.Spec)
	if err != nil {
		return nil, invalid("spec", err.Error())
	}
	if (s.Producer == "") == (strings.TrimSpace(s.Statement) == "") {
		return nil, invalid("source", "want a Go producer's name or a SQL statement, one of the two")
	}
	if s.Missed == "" {
		s.Missed = MissedLate
	}
	if s.Missed != MissedLate && s.Missed != MissedSkip {
		return nil, invalid("missed", fmt.Sprintf("%q: want late or skip", s.Missed))
	}
	if err := ValidateTopic(s.Topic); err != nil {
		return nil, err
	}
	if err := ValidateTenant(s.Tenant); err != nil {
		return nil, err
	}
	s.NextAt = sched.Next(time.Now())
	if s.NextAt.IsZero() {
		return nil, invalid("spec", fmt.Sprintf("%q never occurs", s.Spec))
	}
	err = store.SaveSchedule(ctx, o.pool, &store.SavedSchedule{Name: s.Name, Spec: s.Spec, Producer: s.Producer,
		Statement: s.Statement, Missed: string(s.Missed), NextAt: s.NextAt, Topic: s.Topic, Tenant: s.Tenant})
	if err != nil {
		return nil, fmt.Errorf("outbox: save schedule %q: %w", s.Name, err)
	}
	return &s, nil
}

// Schedules lists the schedules by name.
func (o *Outbox) Schedules(ctx context.Context) ([]*Schedule, error) {
	rows, err := store.ListSchedules(ctx, o.pool)
	if err != nil {
		return nil, fmt.Errorf("outbox: schedules: %w", err)
	}
	out := make([]*Schedule, len(rows))
	for i, r := range rows {
		out[i] = &Schedule{Name: r.Name, Spec: r.Spec, Producer: r.Producer, Statement: r.Statement, Missed: Missed(r.Missed),
			NextAt: r.NextAt, LastRun: r.LastRun, Failures: r.Failures, LastError: r.LastError, FailedAt: r.FailedAt,
			RetryAt: r.RetryAt, Topic: r.Topic, Tenant: r.Tenant}
	}
	return out, nil
}

// DeleteSchedule removes a schedule; the runs it created stay. It returns
// an error matching ErrNotFound when there is none.
func (o *Outbox) DeleteSchedule(ctx context.Context, name string) error {
	found, err := store.DeleteSchedule(ctx, o.pool, name)
	if err != nil {
		return fmt.Errorf("outbox: delete schedule %q: %w", name, err)
	}
	if !found {
		return fmt.Errorf("%w: schedule %q", ErrNotFound, name)
	}
	return nil
}
