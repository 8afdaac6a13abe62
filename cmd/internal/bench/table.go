package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Unit formats a figure for the table.
type Unit int

// The units a figure can be shown in.
const (
	PerSecond     Unit = iota // 12,345/s
	Millis                    // 12.3 ms (value in milliseconds)
	MiB                       // 45.2 MiB (value in MiB)
	Times                     // 0.42× (a ratio)
	Percent                   // 87% (value is a fraction: 0.87)
	Count                     // 12,345 (a number of things)
	Seconds                   // 149.2 s (value in seconds)
	PercentTenths             // 0.4% (value is a fraction: 0.004), for small shares
	Micros                    // 123 µs (value in microseconds)
	Bytes                     // 1,234 B (value in bytes)
	Hundredths                // 0.15 (a number per unit, to two places)
)

// Format renders v in the unit.
func (u Unit) Format(v float64) string {
	switch u {
	case PerSecond:
		return Thousands(v) + "/s"
	case Millis:
		if v < 10 {
			return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
		}
		return Thousands(v) + " ms"
	case MiB:
		return strconv.FormatFloat(v, 'f', 1, 64) + " MiB"
	case Times:
		return strconv.FormatFloat(v, 'f', 2, 64) + "×"
	case Percent:
		return strconv.FormatFloat(v*100, 'f', 0, 64) + "%"
	case Count:
		return Thousands(v)
	case Seconds:
		return strconv.FormatFloat(v, 'f', 1, 64) + " s"
	case PercentTenths:
		return strconv.FormatFloat(v*100, 'f', 1, 64) + "%"
	case Micros:
		if v < 10 {
			return strconv.FormatFloat(v, 'f', 1, 64) + " µs"
		}
		return Thousands(v) + " µs"
	case Bytes:
		return Thousands(v) + " B"
	case Hundredths:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// formatBare renders v in the unit without its suffix, for the low end of
// a range ("1,200–1,350/s").
func (u Unit) formatBare(v float64) string {
	s := u.Format(v)
	for _, suffix := range []string{"/s", " ms", " µs", " s", " MiB", " B", "×", "%"} {
		if strings.HasSuffix(s, suffix) {
			return strings.TrimSuffix(s, suffix)
		}
	}
	return s
}

// Thousands rounds v to an integer and groups its digits by thousands
// with commas: 12345.6 → "12,346".
func Thousands(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	n := int64(math.Round(v))
	neg := n < 0
	if neg {
		n = -n
	}
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Goal is what a row should reach. Check is given the row once all runs
// are in and judges it on medians.
type Goal struct {
	// Text states the goal in the table ("≥ 0.5× River").
	Text string
	// Check reports whether the row meets it.
	Check func(r *Row) bool
}

// AtLeast is met when the row's median value is at least v.
func AtLeast(v float64) func(r *Row) bool {
	return func(r *Row) bool { return r.Value.Median() >= v }
}

// AtMost is met when the row's median value is at most v.
func AtMost(v float64) func(r *Row) bool {
	return func(r *Row) bool { return r.Value.Len() > 0 && r.Value.Median() <= v }
}

// Below is met when the row's median value is under v.
func Below(v float64) func(r *Row) bool {
	return func(r *Row) bool { return r.Value.Median() < v }
}

// RatioAtLeast is met when the row's median ratio to its baseline is at
// least v.
func RatioAtLeast(v float64) func(r *Row) bool {
	return func(r *Row) bool { return r.Ratio.Len() > 0 && r.Ratio.Median() >= v }
}

// RatioAtMost is met when the row's median ratio to its baseline is at
// most v.
func RatioAtMost(v float64) func(r *Row) bool {
	return func(r *Row) bool { return r.Ratio.Len() > 0 && r.Ratio.Median() <= v }
}

// All is met when every check is.
func All(checks ...func(r *Row) bool) func(r *Row) bool {
	return func(r *Row) bool {
		for _, c := range checks {
			if !c(r) {
				return false
			}
		}
		return true
	}
}

// Row is one line of the results table: a figure measured in every run,
// optionally next to a baseline measured in the same runs, and the ratio
// of the two computed run by run.
type Row struct {
	// Scenario numbers and names the scenario ("1. Drain").
	Scenario string
	// Measure says what was measured, with its settings.
	Measure string
	// Unit formats Value.
	Unit Unit
	// Value holds the figure of each run.
	Value Samples

	// Baseline names what the figure is compared with ("River no-op");
	// empty when there is none.
	Baseline string
	// BaselineUnit formats BaselineValue (usually Unit).
	BaselineUnit Unit
	// BaselineValue holds the baseline's figure of each run.
	BaselineValue Samples
	// RatioUnit formats Ratio: Times or Percent.
	RatioUnit Unit
	// Ratio holds Value ÷ BaselineValue of each run.
	Ratio Samples

	// Also are figures measured beside Value in the same runs, shown by
	// their medians after the result: what a goal checks besides the
	// value (the 429s and failures of a rate-limited drain).
	Also []*Figure

	// Goal is what the row should reach; the zero Goal means none.
	Goal Goal
	// Err, when set, is why the row has no figures.
	Err error
}

// Figure is a secondary figure of a row, one value per run, like Value.
type Figure struct {
	// Name says what it is ("429s"); it is written before the value.
	Name string
	// Unit formats Value.
	Unit Unit
	// Value holds the figure of each run.
	Value Samples
}

// AtMost is met when the median of f is at most v. Goals use it to check a
// row's secondary figures.
func (f *Figure) AtMost(v float64) func(r *Row) bool {
	return func(*Row) bool { return f.Value.Len() > 0 && f.Value.Median() <= v }
}

// AtLeast is met when the median of f is at least v.
func (f *Figure) AtLeast(v float64) func(r *Row) bool {
	return func(*Row) bool { return f.Value.Len() > 0 && f.Value.Median() >= v }
}

// also renders the medians of the row's secondary figures as
// " (name value, name value)", or "" when none has a value.
func (r *Row) also() string {
	var parts []string
	for _, f := range r.Also {
		if f.Value.Len() > 0 {
			parts = append(parts, f.Name+" "+f.Unit.Format(f.Value.Median()))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Status is "met", "missed", "—" (no goal), or "not run".
func (r *Row) Status() string {
	switch {
	case r.Err != nil || r.Value.Len() == 0:
		if r.Goal.Text == "" {
			return "—"
		}
		return "not run"
	case r.Goal.Text == "" || r.Goal.Check == nil:
		return "—"
	case r.Goal.Check(r):
		return "met"
	}
	return "**missed**"
}

// Met reports whether the row has a goal and meets it.
func (r *Row) Met() bool { return r.Status() == "met" }

// HasGoal reports whether the row has a goal.
func (r *Row) HasGoal() bool { return r.Goal.Text != "" }

// cell renders the median of s, or "—" for no samples.
func cell(u Unit, s Samples) string {
	if s.Len() == 0 {
		return "—"
	}
	return u.Format(s.Median())
}

// spread renders min–max of s, or "—" when there is at most one sample.
func spread(u Unit, s Samples) string {
	if s.Len() < 2 {
		return "—"
	}
	return u.formatBare(s.Min()) + "–" + u.Format(s.Max())
}

// Columns are the table's header cells.
var Columns = []string{"Scenario", "Measure", "Result (median)", "Spread (min–max)", "Baseline (median)", "vs baseline (min–max)", "Goal", "Status"}

// Cells renders the row as table cells, in the order of Columns.
func (r *Row) Cells() []string {
	result, spr := cell(r.Unit, r.Value)+r.also(), spread(r.Unit, r.Value)
	if r.Err != nil {
		result, spr = "error: "+r.Err.Error(), "—"
	}
	base, vs := "—", "—"
	if r.Baseline != "" {
		base = r.Baseline
		if r.BaselineValue.Len() > 0 {
			base += ": " + cell(r.BaselineUnit, r.BaselineValue)
		}
		if r.Ratio.Len() > 0 {
			vs = cell(r.RatioUnit, r.Ratio)
			if r.Ratio.Len() > 1 {
				vs += " (" + spread(r.RatioUnit, r.Ratio) + ")"
			}
		}
	}
	goal := r.Goal.Text
	if goal == "" {
		goal = "—"
	}
	return []string{r.Scenario, r.Measure, result, spr, base, vs, goal, r.Status()}
}

// Markdown renders rows as a GitHub-flavoured Markdown table.
func Markdown(rows []*Row) string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
		}
		b.WriteString("\n")
	}
	line(Columns)
	seps := make([]string, len(Columns))
	for i := range seps {
		seps[i] = "---"
	}
	line(seps)
	for _, r := range rows {
		line(r.Cells())
	}
	return b.String()
}
