package outbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"
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
	// the first instant after the jump (see ParseSpec).
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

// MissedGrace is how late an occurrence may be created under MissedSkip.
const MissedGrace = time.Minute

var scheduleNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSpec parses a Schedule's Spec into its cron schedule, whose Next
// gives one occurrence per wall-clock time the fields match in the spec's
// zone: a time the clocks go back over occurs at its first instant (02:30
// CEST, not 02:30 CET too, on 2026-10-25 in Europe/Berlin), a time they
// jump over at the first instant after the jump (03:00 CEST for 02:30 on
// 2026-03-29), and times that fall on one instant are one occurrence.
func ParseSpec(spec string) (cron.Schedule, error) {
	fields := strings.Fields(spec)
	if len(fields) == 0 {
		return nil, errors.New("empty schedule")
	}
	loc := time.UTC
	if last := fields[len(fields)-1]; len(fields) > 1 && looksLikeZone(last) {
		l, err := time.LoadLocation(last)
		if err != nil {
			return nil, fmt.Errorf("time zone %q: %w", last, err)
		}
		loc, fields = l, fields[:len(fields)-1]
	}
	s, err := cronParser.Parse(strings.Join(fields, " "))
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	if c, ok := s.(*cron.SpecSchedule); ok {
		// The fields are matched against wall-clock times, read as UTC
		// (no clock changes there), and each time found is then placed in
		// loc by wallClock.
		c.Location = time.UTC
		return &wallClock{fields: c, loc: loc}, nil
	}
	return s, nil
}

// wallClock is a cron schedule in a time zone, with one occurrence per
// wall-clock time the fields match (issue 22: robfig/cron, stepping
// instants, had `30 2 * * * Europe/Berlin` twice on the day the clocks go
// back and not at all on the day they go forward). A wall-clock time that
// happens twice (the clocks go back over it) occurs at its first instant; a
// wall-clock time that does not happen (the clocks jump over it) occurs at
// the first instant after the jump, as Vixie cron runs the fixed-time jobs
// of a skipped hour right after the change. Wall-clock times that fall on
// one instant (02:30 and 03:00 on the day 02:00 becomes 03:00) are one
// occurrence. On days without a change the occurrences are the instants
// they always were, so the runs' keys do not move.
type wallClock struct {
	fields *cron.SpecSchedule // its Location is UTC: wall-clock times read as UTC
	loc    *time.Location
}

// Next returns the first occurrence after t, or the zero time if there is
// none within five years.
func (w *wallClock) Next(t time.Time) time.Time {
	// The latest wall-clock time reached by t: right after the clocks went
	// back, the wall-clock times they went back over have occurred already,
	// at their first instant, and must not occur again.
	lt := t.In(w.loc)
	reached := wallTime(lt)
	if start, _ := lt.ZoneBounds(); !start.IsZero() {
		if before := wallTime(start.Add(-time.Nanosecond).In(w.loc)); before.After(reached) {
			reached = before
		}
	}
	// Instants grow with wall-clock times (never back), so the first match
	// after reached whose instant is after t is the next occurrence. The
	// loop only goes round more than once after two changes a day apart.
	for c, i := reached, 0; i < maxWallSkips; i++ {
		if c = w.fields.Next(c); c.IsZero() {
			return time.Time{}
		}
		if at := w.instant(c); at.After(t) {
			return at.In(t.Location())
		}
	}
	return time.Time{}
}

// maxWallSkips bounds the wall-clock times Next passes over (an every-second
// schedule over a day of clock changes).
const maxWallSkips = 200_000

// wallTime is t's wall-clock time, read as UTC.
func wallTime(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instant is the first instant at which w's zone shows the wall-clock time c
// (read as UTC), or, when the clocks jump over c, the instant of the jump.
// (time.Date does not say which instant it picks in either case.)
func (w *wallClock) instant(c time.Time) time.Time {
	// Every instant showing c lies within 14 hours of c read as UTC (the
	// zones' offsets): walk the zone's periods from 15 hours before.
	p := c.Add(-15 * time.Hour)
	limit := c.Add(15 * time.Hour)
	for {
		lp := p.In(w.loc)
		_, off := lp.Zone()
		start, end := lp.ZoneBounds()
		at := c.Add(-time.Duration(off) * time.Second)
		if (start.IsZero() || !at.Before(start)) && (end.IsZero() || at.Before(end)) {
			return at // periods are walked in order: the first is the earliest
		}
		if end.IsZero() || end.After(limit) {
			break
		}
		// A jump forward over c: [end+off, end+next offset) never shows.
		if _, next := end.In(w.loc).Zone(); next > off &&
			!c.Before(end.Add(time.Duration(off)*time.Second)) && c.Before(end.Add(time.Duration(next)*time.Second)) {
			return end
		}
		p = end
	}
	return time.Date(c.Year(), c.Month(), c.Day(), c.Hour(), c.Minute(), c.Second(), 0, w.loc)
}

// looksLikeZone tells a time zone ("UTC", "Europe/Berlin") from a cron
// field: it has letters, is no list of day or month names, and loads.
func looksLikeZone(f string) bool {
	if !strings.ContainsAny(strings.ToUpper(f), "ABCDEFGHIJKLMNOPQRSTUVWXYZ") || strings.HasPrefix(f, "@") || f == "Local" {
		return false
	}
	names := strings.FieldsFunc(strings.ToUpper(f), func(r rune) bool { return r == ',' || r == '-' || r == '/' })
	allNames := true
	for _, n := range names {
		switch n {
		case "SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT",
			"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC":
		default:
			allNames = false
		}
	}
	if allNames {
		return false
	}
	_, err := time.LoadLocation(f)
	return err == nil
}

// OccurrenceRunKey is the key of the run an occurrence creates.
func OccurrenceRunKey(schedule string, at time.Time) string {
	return schedule + ":" + at.UTC().Format("2006-01-02T15:04:05Z")
}

// SaveSchedule creates or replaces a schedule. Its next occurrence is the
// first after now; runs already created are left as they are. Replacing a
// failing schedule clears its failures.
func (o *Outbox) SaveSchedule(ctx context.Context, s Schedule) (*Schedule, error) {
	if !scheduleNamePattern.MatchString(s.Name) {
		return nil, invalid("name", fmt.Sprintf(
			"%q: want 1 to 100 letters, digits, \"_\", \".\" and \"-\"", shorten(s.Name)))
	}
	sched, err := ParseSpec(s.Spec)
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
	s.NextAt = sched.Next(time.Now())
	if s.NextAt.IsZero() {
		return nil, invalid("spec", fmt.Sprintf("%q never occurs", s.Spec))
	}
	var producer, statement *string
	if s.Producer != "" {
		producer = &s.Producer
	} else {
		statement = &s.Statement
	}
	_, err = o.pool.Exec(ctx, `INSERT INTO sendonce_schedule (name, spec, producer, statement, missed, next_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (name) DO UPDATE SET spec = $2, producer = $3, statement = $4, missed = $5, next_at = $6,
			failures = 0, last_error = NULL, failed_at = NULL, retry_at = NULL, updated_at = now()`,
		s.Name, s.Spec, producer, statement, string(s.Missed), s.NextAt)
	if err != nil {
		return nil, fmt.Errorf("outbox: save schedule %q: %w", s.Name, err)
	}
	return &s, nil
}

// Schedules lists the schedules by name.
func (o *Outbox) Schedules(ctx context.Context) ([]*Schedule, error) {
	rows, err := o.pool.Query(ctx, `SELECT name, spec, coalesce(producer, ''), coalesce(statement, ''), missed, next_at, coalesce(last_run, ''),
			failures, coalesce(last_error, ''), failed_at, retry_at
		FROM sendonce_schedule ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("outbox: schedules: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Schedule, error) {
		s := &Schedule{}
		return s, r.Scan(&s.Name, &s.Spec, &s.Producer, &s.Statement, &s.Missed, &s.NextAt, &s.LastRun,
			&s.Failures, &s.LastError, &s.FailedAt, &s.RetryAt)
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: schedules: %w", err)
	}
	return out, nil
}

// DeleteSchedule removes a schedule; the runs it created stay. It returns
// an error matching ErrNotFound when there is none.
func (o *Outbox) DeleteSchedule(ctx context.Context, name string) error {
	tag, err := o.pool.Exec(ctx, `DELETE FROM sendonce_schedule WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("outbox: delete schedule %q: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: schedule %q", ErrNotFound, name)
	}
	return nil
}
