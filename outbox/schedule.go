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
	// "@hourly" and "@every 10m" are accepted too.
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

// ParseSpec parses a Schedule's Spec into its cron schedule.
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
		c.Location = loc
	}
	return s, nil
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
// first after now; runs already created are left as they are.
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
		ON CONFLICT (name) DO UPDATE SET spec = $2, producer = $3, statement = $4, missed = $5, next_at = $6, updated_at = now()`,
		s.Name, s.Spec, producer, statement, string(s.Missed), s.NextAt)
	if err != nil {
		return nil, fmt.Errorf("outbox: save schedule %q: %w", s.Name, err)
	}
	return &s, nil
}

// Schedules lists the schedules by name.
func (o *Outbox) Schedules(ctx context.Context) ([]*Schedule, error) {
	rows, err := o.pool.Query(ctx, `SELECT name, spec, coalesce(producer, ''), coalesce(statement, ''), missed, next_at, coalesce(last_run, '')
		FROM sendonce_schedule ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("outbox: schedules: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Schedule, error) {
		s := &Schedule{}
		return s, r.Scan(&s.Name, &s.Spec, &s.Producer, &s.Statement, &s.Missed, &s.NextAt, &s.LastRun)
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
