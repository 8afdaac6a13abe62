package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSamplesMedianMinMax(t *testing.T) {
	tests := []struct {
		in            Samples
		med, min, max float64
	}{
		{nil, 0, 0, 0},
		{Samples{5}, 5, 5, 5},
		{Samples{3, 1, 2}, 2, 1, 3},
		{Samples{4, 1, 3, 2}, 2.5, 1, 4},
		{Samples{10, 10, 1}, 10, 1, 10},
	}
	for _, tt := range tests {
		if got := tt.in.Median(); got != tt.med {
			t.Errorf("%v.Median() = %v, want %v", tt.in, got, tt.med)
		}
		if got := tt.in.Min(); got != tt.min {
			t.Errorf("%v.Min() = %v, want %v", tt.in, got, tt.min)
		}
		if got := tt.in.Max(); got != tt.max {
			t.Errorf("%v.Max() = %v, want %v", tt.in, got, tt.max)
		}
	}
}

func TestMedianLeavesSamplesInOrder(t *testing.T) {
	s := Samples{3, 1, 2}
	_ = s.Median()
	if s[0] != 3 || s[1] != 1 || s[2] != 2 {
		t.Errorf("Median reordered its samples: %v", s)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{
		50: 50 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond, 1: time.Millisecond,
	} {
		if got := Percentile(ds, p); got != want {
			t.Errorf("Percentile(1..100 ms, %v) = %v, want %v", p, got, want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
	if got := Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("Percentile of one value = %v, want it", got)
	}
}

func TestRate(t *testing.T) {
	if got := Rate(500, 2*time.Second); got != 250 {
		t.Errorf("Rate(500, 2s) = %v, want 250", got)
	}
	if got := Rate(5, 0); got != 0 {
		t.Errorf("Rate(5, 0) = %v, want 0", got)
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{
		0: "0", 7: "7", 999.4: "999", 999.5: "1,000", 12345.6: "12,346", 1234567: "1,234,567", -4321: "-4,321",
	} {
		if got := Thousands(in); got != want {
			t.Errorf("Thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestUnitFormat(t *testing.T) {
	tests := []struct {
		u    Unit
		v    float64
		want string
	}{
		{PerSecond, 12345.4, "12,345/s"},
		{Millis, 3.14159, "3.1 ms"},
		{Millis, 231.6, "232 ms"},
		{MiB, 82.94, "82.9 MiB"},
		{Count, 3012.4, "3,012"},
		{Seconds, 149.24, "149.2 s"},
		{PercentTenths, 0.0042, "0.4%"},
		{Times, 0.1234, "0.12×"},
		{Percent, 0.873, "87%"},
		{Micros, 4.26, "4.3 µs"},
		{Micros, 1234.5, "1,235 µs"},
		{Bytes, 1536.2, "1,536 B"},
	}
	for _, tt := range tests {
		if got := tt.u.Format(tt.v); got != tt.want {
			t.Errorf("Format(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestRowStatus(t *testing.T) {
	goal := Goal{Text: "≥ 0.5×", Check: RatioAtLeast(0.5)}
	tests := []struct {
		name string
		row  Row
		want string
	}{
		{"no goal", Row{Value: Samples{1}}, "—"},
		{"met on the median", Row{Value: Samples{1, 1, 1}, Ratio: Samples{0.4, 0.6, 0.7}, Goal: goal}, "met"},
		{"missed on the median", Row{Value: Samples{1, 1, 1}, Ratio: Samples{0.4, 0.45, 0.9}, Goal: goal}, "**missed**"},
		{"no runs", Row{Goal: goal}, "not run"},
		{"failed", Row{Value: Samples{1}, Ratio: Samples{1}, Goal: goal, Err: errors.New("boom")}, "not run"},
		{"below", Row{Value: Samples{240, 260, 100}, Goal: Goal{Text: "< 250", Check: Below(250)}}, "met"},
		{"all", Row{Value: Samples{19_000}, Ratio: Samples{0.9}, Goal: Goal{Text: "x", Check: All(AtLeast(20_000), RatioAtLeast(0.5))}}, "**missed**"},
	}
	for _, tt := range tests {
		if got := tt.row.Status(); got != tt.want {
			t.Errorf("%s: Status() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestMarkdown(t *testing.T) {
	rows := []*Row{
		{
			Scenario: "1. Drain", Measure: "full path", Unit: PerSecond, Value: Samples{900, 1100, 1000},
			Baseline: "River", BaselineUnit: PerSecond, BaselineValue: Samples{8000, 9000, 10000},
			RatioUnit: Times, Ratio: Samples{0.1, 0.12, 0.11},
			Goal: Goal{Text: "≥ 0.5× River", Check: RatioAtLeast(0.5)},
		},
		{Scenario: "5. Memory", Measure: "a|b", Unit: MiB, Value: Samples{80}, Goal: Goal{Text: "< 100 MiB", Check: Below(100)}},
		{Scenario: "4. E2E", Measure: "p99", Unit: Millis, Err: errors.New("no server"), Goal: Goal{Text: "< 250 ms", Check: Below(250)}},
	}
	got := Markdown(rows)
	want := "| Scenario | Measure | Result (median) | Spread (min–max) | Baseline (median) | vs baseline (min–max) | Goal | Status |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- |\n" +
		"| 1. Drain | full path | 1,000/s | 900–1,100/s | River: 9,000/s | 0.11× (0.10–0.12×) | ≥ 0.5× River | **missed** |\n" +
		"| 5. Memory | a\\|b | 80.0 MiB | — | — | — | < 100 MiB | met |\n" +
		"| 4. E2E | p99 | error: no server | — | — | — | < 250 ms | not run |\n"
	if got != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", got, want)
	}
}

func TestReportGoals(t *testing.T) {
	r := &Report{Runs: 3, Date: time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC), Rows: []*Row{
		{Scenario: "A", Measure: "a", Value: Samples{1}, Goal: Goal{Text: "≥ 2", Check: AtLeast(2)}},
		{Scenario: "B", Measure: "b", Value: Samples{3}, Goal: Goal{Text: "≥ 2", Check: AtLeast(2)}},
		{Scenario: "C", Measure: "c", Value: Samples{3}},
	}}
	s := r.Summary()
	for _, want := range []string{"Goals met: 1 of 2.", "Missed: A (a)", "median of 3 runs", "2030-01-02 03:04 UTC"} {
		if !strings.Contains(s, want) {
			t.Errorf("Summary lacks %q:\n%s", want, s)
		}
	}
	md := r.Markdown()
	if !strings.HasPrefix(md, "# Benchmarks\n") || !strings.Contains(md, "| A | a |") {
		t.Errorf("Markdown report is not a document with the table:\n%s", md)
	}
}

func TestPayloadIsAValidIntent(t *testing.T) {
	for _, in := range Intents("t", 3) {
		if err := in.Validate(); err != nil {
			t.Errorf("intent %s: %v", in.Key, err)
		}
	}
}

func TestSecondaryFigures(t *testing.T) {
	if got := spread(Seconds, Samples{12.5, 14}); got != "12.5–14.0 s" {
		t.Errorf("spread of seconds = %q", got)
	}
	refused := &Figure{Name: "429s", Unit: PercentTenths, Value: Samples{0.01, 0.03, 0.02}}
	empty := &Figure{Name: "never", Unit: Count}
	r := &Row{Unit: Count, Value: Samples{3000}, Also: []*Figure{refused, empty},
		Goal: Goal{Text: "429s ≤ 2%", Check: refused.AtMost(0.02)}}
	if got := r.Cells()[2]; got != "3,000 (429s 2.0%)" {
		t.Errorf("result cell = %q", got)
	}
	if r.Status() != "met" {
		t.Errorf("AtMost(0.02) on a median of 2%%: %s", r.Status())
	}
	if (&Figure{}).AtMost(1)(r) {
		t.Error("AtMost is met by a figure with no runs")
	}
}

func TestSpreadOfNewUnits(t *testing.T) {
	if got := spread(Micros, Samples{120, 95}); got != "95–120 µs" {
		t.Errorf("spread(Micros) = %q", got)
	}
	if got := spread(Bytes, Samples{1200, 980}); got != "980–1,200 B" {
		t.Errorf("spread(Bytes) = %q", got)
	}
}
