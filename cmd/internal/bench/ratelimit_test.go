package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

// fill records one run of a cell as drain does.
func (c *rateCell) fill(accepted, budget, requests, share, failed, duplicates float64) {
	c.row.Value.Add(accepted)
	c.row.BaselineValue.Add(budget)
	c.row.Ratio.Add(accepted / budget)
	c.requests.Value.Add(requests)
	c.refused.Value.Add(share)
	c.span.Value.Add((budget - 20) / 20)
	c.failed.Value.Add(failed)
	c.duplicates.Value.Add(duplicates)
}

func TestRateLimitedGoals(t *testing.T) {
	tests := []struct {
		name                                            string
		cell                                            int // 0 configured, 1 discovered
		accepted, budget, requests, share, failed, dups float64
		want                                            string
	}{
		{"configured met", 0, 3000, 3100, 3030, 0.01, 0, 0, "met"},
		{"configured, budget short", 0, 3000, 3500, 3000, 0, 0, 0, "**missed**"},
		{"configured, too many 429s", 0, 3000, 3100, 3100, 0.03, 0, 0, "**missed**"},
		{"configured, one failed", 0, 2999, 3100, 3000, 0, 1, 0, "**missed**"},
		{"configured, a duplicate", 0, 3000, 3100, 3000, 0, 0, 1, "**missed**"},
		{"discovered met", 1, 3000, 4000, 3300, 0.09, 0, 0, "met"},
		{"discovered, budget short", 1, 3000, 4400, 3000, 0, 0, 0, "**missed**"},
		{"discovered, too many 429s", 1, 3000, 3100, 3400, 0.11, 0, 0, "**missed**"},
		{"discovered, one failed", 1, 2999, 3100, 3000, 0, 1, 0, "**missed**"},
	}
	for _, tt := range tests {
		c := NewRateLimited(false, "").cells[tt.cell]
		c.fill(tt.accepted, tt.budget, tt.requests, tt.share, tt.failed, tt.dups)
		if got := c.row.Status(); got != tt.want {
			t.Errorf("%s: status %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRateLimitedRows(t *testing.T) {
	s := NewRateLimited(true, "")
	rows := s.Rows()
	if len(rows) != 2 || !strings.Contains(rows[0].Measure, "--api-rate 20/s") || !strings.Contains(rows[1].Measure, "no `--api-rate`") {
		t.Fatalf("rows are not configured then discovered: %+v", rows)
	}
	if !strings.Contains(rows[0].Measure, "600 intents") {
		t.Errorf("quick row measures %q, want 600 intents", rows[0].Measure)
	}
	s.cells[0].fill(600, 636, 612, 0.0196, 0, 0)
	got := rows[0].Cells()
	if got[2] != "600 (requests 612, 429s 2.0%, span 30.8 s, failed 0, duplicates 0)" ||
		got[4] != "budget (20 × span + 20): 636" || got[5] != "94%" || got[7] != "met" {
		t.Errorf("cells %q", got)
	}
	if n := s.Notes(); len(n) != 1 || !strings.Contains(n[0], "Measured once per benchmark") {
		t.Errorf("notes %q", n)
	}
}

// The runner calls Run once per run; the scenario measures on the first
// only, so a second call must return at once without touching the
// database.
func TestRateLimitedRunsOnce(t *testing.T) {
	s := NewRateLimited(true, "")
	s.ran = true
	var logged []string
	env := &Env{Logf: func(f string, _ ...any) { logged = append(logged, f) }}
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "skipping") {
		t.Errorf("logged %q, want one skipping line", logged)
	}
}

func TestPaceTrace(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int, refused bool) fakeapi.RequestRecord {
		return fakeapi.RequestRecord{ReceivedAt: t0.Add(time.Duration(ms) * time.Millisecond), RateLimited: refused}
	}
	reqs := []fakeapi.RequestRecord{at(0, false), at(500, true), at(999, false), at(2500, false)}
	if got, want := paceTrace(reqs, t0, time.Second), "2/1 0/0 1/0"; got != want {
		t.Errorf("paceTrace = %q, want %q", got, want)
	}
}

func TestFleetTrace(t *testing.T) {
	a, b := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	a.Write([]byte(`{"level":"INFO","msg":"budget: the API answered 429; the fleet slows down","rate":14.5}
{"level":"INFO","msg":"sent"}
{"level":"INFO","msg":"snoozed","wait":"1s"}
not json
`))
	b.Write([]byte(`{"level":"WARN","msg":"intent failed","reason":"x"}
{"level":"INFO","msg":"budget: the API answered 429; the fleet slows down","rate":10}
`))
	got := fleetTrace([]*workProc{{logs: a}, {logs: b}})
	want := "2 budget cuts after a 429 (rates, per worker in log order: 14.5 10), 1 snoozes, 1 intents failed, 1 warnings or errors"
	if got != want {
		t.Errorf("fleetTrace = %q, want %q", got, want)
	}
}
