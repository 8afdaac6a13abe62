package cronspec_test

import (
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed

	"github.com/robfig/cron/v3"

	"github.com/sendonce/sendonce/internal/base/cronspec"
)

// occurrences lists a schedule's occurrences in [from, to), in UTC.
func occurrences(t *testing.T, s cron.Schedule, from, to time.Time) []string {
	t.Helper()
	var out []string
	for at := s.Next(from.Add(-time.Nanosecond)); !at.IsZero() && at.Before(to); at = s.Next(at) {
		out = append(out, at.UTC().Format(time.RFC3339))
		if len(out) > 100_000 {
			t.Fatal("runaway schedule")
		}
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// Hole 11 (issue 22): `30 2 * * * Europe/Berlin` had two occurrences on
// 2026-10-25 (02:30 happens twice as the clocks go back) and none on
// 2026-03-29 (02:30 does not exist as they go forward). The rule: each
// occurrence is a wall-clock time in the spec's zone, created once. A time
// the clocks go back over is taken at its first instant; a time they jump
// over is taken at the first instant after the jump (as Vixie cron runs its
// fixed-time jobs of a skipped hour right after the change). Occurrences
// that fall on one instant are one.
func TestOccurrencesAcrossDST(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, spec string
		from, to   string // the window, in UTC
		want       []string
	}{
		// Europe/Berlin: 2026-03-29 02:00 CET → 03:00 CEST (01:00Z);
		// 2026-10-25 03:00 CEST → 02:00 CET (01:00Z).
		{"Berlin autumn: 02:30 twice, one run at the first", "30 2 * * * Europe/Berlin",
			"2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z", []string{"2026-10-25T00:30:00Z"}},
		{"Berlin spring: no 02:30, one run right after the gap (03:00 CEST)", "30 2 * * * Europe/Berlin",
			"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", []string{"2026-03-29T01:00:00Z"}},
		{"Berlin spring, six fields", "0 30 2 * * * Europe/Berlin",
			"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", []string{"2026-03-29T01:00:00Z"}},
		{"Berlin, the days around the changes as before", "30 2 * * * Europe/Berlin",
			"2026-03-27T23:00:00Z", "2026-03-31T22:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"}},
		{"Berlin, the days around autumn's change", "30 2 * * * Europe/Berlin",
			"2026-10-23T22:00:00Z", "2026-10-26T23:00:00Z",
			[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"Berlin, 03:00 on the spring day is the gap's instant too: one run", "0 2,3 * * * Europe/Berlin",
			"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", []string{"2026-03-29T01:00:00Z"}},
		{"Berlin autumn, every 30 minutes: each wall-clock time once", "*/30 * * * * Europe/Berlin",
			"2026-10-24T22:00:00Z", "2026-10-25T03:00:00Z", []string{
				"2026-10-24T22:00:00Z", "2026-10-24T22:30:00Z", "2026-10-24T23:00:00Z", "2026-10-24T23:30:00Z",
				"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", // 02:00, 02:30 CEST; not again in CET
				"2026-10-25T02:00:00Z", "2026-10-25T02:30:00Z", // 03:00, 03:30 CET
			}},
		{"Berlin spring, every 30 minutes: 02:00, 02:30 and 03:00 are one run at 03:00 CEST", "*/30 * * * * Europe/Berlin",
			"2026-03-28T23:00:00Z", "2026-03-29T03:00:00Z", []string{
				"2026-03-28T23:00:00Z", "2026-03-28T23:30:00Z", "2026-03-29T00:00:00Z", "2026-03-29T00:30:00Z",
				"2026-03-29T01:00:00Z",
				"2026-03-29T01:30:00Z", "2026-03-29T02:00:00Z", "2026-03-29T02:30:00Z",
			}},
		// Australia/Lord_Howe shifts by 30 minutes: 2026-04-05 02:00 +11
		// → 01:30 +1030 (15:00Z); 2026-10-04 02:00 +1030 → 02:30 +11
		// (15:30Z).
		{"Lord Howe autumn: 01:45 twice, one run at the first", "45 1 * * * Australia/Lord_Howe",
			"2026-04-04T13:00:00Z", "2026-04-05T13:00:00Z", []string{"2026-04-04T14:45:00Z"}},
		{"Lord Howe spring: no 02:15, one run right after the gap", "15 2 * * * Australia/Lord_Howe",
			"2026-10-03T13:00:00Z", "2026-10-04T13:00:00Z", []string{"2026-10-03T15:30:00Z"}},
		{"Lord Howe autumn, 02:00 is after the repeated half hour: once", "0 2 * * * Australia/Lord_Howe",
			"2026-04-03T13:00:00Z", "2026-04-06T13:00:00Z",
			[]string{"2026-04-03T15:00:00Z", "2026-04-04T15:30:00Z", "2026-04-05T15:30:00Z"}},
		{"Lord Howe spring, 01:30 is before the gap: once", "30 1 * * * Australia/Lord_Howe",
			"2026-10-02T13:00:00Z", "2026-10-05T13:00:00Z",
			[]string{"2026-10-02T15:00:00Z", "2026-10-03T15:00:00Z", "2026-10-04T14:30:00Z"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := cronspec.Parse(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := occurrences(t, s, utc(c.from), utc(c.to)); !slices.Equal(got, c.want) {
				t.Errorf("%s in [%s, %s):\n got  %v\n want %v", c.spec, c.from, c.to, got, c.want)
			}
		})
	}
}

// TestNextFromInsideTheRepeatedHour: a worker ticking during the hour the
// clocks go back over (CET 02:00–03:00 on 2026-10-25) finds the next
// occurrence after the wall-clock times already passed in CEST, not their
// second coming.
func TestNextFromInsideTheRepeatedHour(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ spec, after, want string }{
		{"30 2 * * * Europe/Berlin", "2026-10-25T01:15:00Z", "2026-10-26T01:30:00Z"},
		{"30 2 * * * Europe/Berlin", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		{"*/30 * * * * Europe/Berlin", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"},
		{"30 2 * * * Europe/Berlin", "2026-03-29T00:59:59Z", "2026-03-29T01:00:00Z"},
		{"30 2 * * * Europe/Berlin", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"},
	} {
		s, err := cronspec.Parse(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Next(utc(c.after)).UTC().Format(time.RFC3339); got != c.want {
			t.Errorf("%s: Next(%s) = %s, want %s", c.spec, c.after, got, c.want)
		}
	}
}

// TestOccurrencesOffTheChangesAreAsBefore: run keys are the occurrence's
// instant, so on every day without a clock change the occurrences must be
// the instants they always were (robfig/cron's, the schedules' times
// before issue 22): existing schedules keep their keys.
func TestOccurrencesOffTheChangesAreAsBefore(t *testing.T) {
	t.Parallel()
	parser := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	changes := map[string]bool{}
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for at := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); at.Year() == 2026; {
			_, end := at.ZoneBounds()
			if end.IsZero() {
				break
			}
			changes[zone+end.In(loc).Format(" 2006-01-02")] = true
			at = end.In(loc)
		}
	}
	for _, spec := range []struct{ cron, zone string }{
		{"30 2 * * *", "Europe/Berlin"}, {"0 8 * * MON", "Europe/Berlin"}, {"*/30 * * * *", "Europe/Berlin"},
		{"15 1,2,3 * * *", "America/New_York"}, {"45 1 * * *", "Australia/Lord_Howe"},
		{"0 7 1 * *", "UTC"}, {"*/10 * * * *", "UTC"}, {"@daily", "Europe/Berlin"},
	} {
		ours, err := cronspec.Parse(spec.cron + " " + spec.zone)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := parser.Parse(spec.cron)
		if err != nil {
			t.Fatal(err)
		}
		loc, _ := time.LoadLocation(spec.zone)
		theirs.(*cron.SpecSchedule).Location = loc
		from, to := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
		offChange := func(all []string) []string {
			var out []string
			for _, s := range all {
				if !changes[spec.zone+utc(s).In(loc).Format(" 2006-01-02")] {
					out = append(out, s)
				}
			}
			return out
		}
		got, want := offChange(occurrences(t, ours, from, to)), offChange(occurrences(t, theirs, from, to))
		if !slices.Equal(got, want) {
			t.Errorf("%s %s: %d occurrences off the changes, want %d as before", spec.cron, spec.zone, len(got), len(want))
		}
	}
}

func TestParse(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	from := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) // a Tuesday
	for _, c := range []struct {
		spec string
		want time.Time
	}{
		{"0 8 * * MON Europe/Berlin", time.Date(2026, 12, 7, 8, 0, 0, 0, berlin)},
		{"0 8 * * MON", time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)},
		{"0 8 * * MON-FRI UTC", time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)},
		{"* * * * * *", from.Add(time.Second)},
		{"@hourly", from.Add(time.Hour)},
	} {
		s, err := cronspec.Parse(c.spec)
		if err != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if got := s.Next(from); !got.Equal(c.want) {
			t.Errorf("%q: next %s, want %s", c.spec, got, c.want)
		}
	}
	for _, bad := range []string{"", "0 8 * *", "0 8 * * MON Mars/Olympus", "61 * * * *"} {
		if _, err := cronspec.Parse(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
