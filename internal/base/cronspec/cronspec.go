// Package cronspec reads a schedule's spec (five or six cron fields, then
// optionally a time zone) into occurrences, one per wall-clock time, and
// names the run each occurrence creates. outbox validates specs with it;
// the workers' scheduler steps through occurrences with it.
package cronspec

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MissedGrace is how late an occurrence may be created under a schedule
// whose missed occurrences are skipped (outbox.MissedSkip).
const MissedGrace = time.Minute

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse parses a schedule's spec (outbox.Schedule.Spec) into its cron schedule, whose Next
// gives one occurrence per wall-clock time the fields match in the spec's
// zone: a time the clocks go back over occurs at its first instant (02:30
// CEST, not 02:30 CET too, on 2026-10-25 in Europe/Berlin), a time they
// jump over at the first instant after the jump (03:00 CEST for 02:30 on
// 2026-03-29), and times that fall on one instant are one occurrence.
func Parse(spec string) (cron.Schedule, error) {
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

// RunKey is the key of the run an occurrence creates.
func RunKey(schedule string, at time.Time) string {
	return schedule + ":" + at.UTC().Format("2006-01-02T15:04:05Z")
}
