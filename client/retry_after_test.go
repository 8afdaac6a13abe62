package client

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := testNow // Sun, 01 Mar 2026 12:00:00 UTC
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"", 0, false},
		{"   ", 0, false},
		{"0", 0, true},
		{"1", time.Second, true},
		{" 2 ", 2 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{".25", 250 * time.Millisecond, true},
		{"+3", 3 * time.Second, true},
		{"1e1", 10 * time.Second, true},
		{"60", time.Minute, true},
		{"120", 2 * time.Minute, true},
		{"-1", 0, false},
		{"-0.5", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"+Inf", 0, false},
		{"1e999", 0, false}, // overflows to +Inf: non-finite
		{"0x10", 0, false},
		{"1_0", 0, false},
		{"soon", 0, false},
		{"in 5 minutes", 0, false},
		{"1e300", time.Duration(math.MaxInt64), true}, // finite: saturates
		// HTTP-dates: max(0, ceil(date − now)).
		{"Sun, 01 Mar 2026 12:00:10 GMT", 10 * time.Second, true},
		{"Sunday, 01-Mar-26 12:00:10 GMT", 10 * time.Second, true}, // RFC 850
		{"Sun Mar  1 12:00:10 2026", 10 * time.Second, true},       // asctime
		{"01 Mar 2026 12:00:10 GMT", 10 * time.Second, true},       // no weekday
		{"01 Mar 2026 12:00:10", 10 * time.Second, true},           // no zone: UTC
		{"Sun, 01 Mar 2026 13:00:10 +0100", 0, false},              // a numeric zone is not an HTTP-date
		{"Sun, 01 Mar 2026 11:59:00 GMT", 0, true},                 // past: no wait
		{"Sun, 01 Mar 2026 12:05:00 GMT", 5 * time.Minute, true},
		{"Sun, 01 Mar 2026 25:00:00 GMT", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

// A date a fraction of a second ahead rounds up to a whole second: coming
// back earlier than asked is not following the instruction.
func TestParseRetryAfterDateRoundsUp(t *testing.T) {
	t.Parallel()
	now := testNow.Add(-300 * time.Millisecond)
	got, ok := parseRetryAfter("Sun, 01 Mar 2026 12:00:00 GMT", now)
	if !ok || got != time.Second {
		t.Fatalf("got %v, %v; want 1s", got, ok)
	}
}

func TestRetryAfterHeaderNameIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h["retry-after"] = []string{"3"} // as a non-Go server might send it
	h2 := http.Header{}
	for k, v := range h { // what net/http's reader does with any spelling
		h2.Add(strings.ToUpper(k), v[0])
	}
	if d, ok := retryAfterFrom(h2, testNow); !ok || d != 3*time.Second {
		t.Fatalf("got %v, %v", d, ok)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "1", "1.5", "-1", "NaN", "Inf", "1e999", "120", "61", "60.0000001",
		"Sun, 01 Mar 2026 12:00:10 GMT", "01 Mar 2026 12:00:10", "Sunday, 01-Mar-26 12:00:10 GMT",
		"Sun Mar  1 12:00:10 2026", "  7  ", "0x1p4", ".", "+", "1e", "9999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseRetryAfter(s, testNow)
		if !ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v with ok=false; want 0", s, d)
		}
		if d < 0 {
			t.Fatalf("parseRetryAfter(%q) = %v; a wait is never negative", s, d)
		}
		// Surrounding whitespace never changes the answer.
		d2, ok2 := parseRetryAfter(" \t"+s+" ", testNow)
		if d2 != d || ok2 != ok {
			t.Fatalf("parseRetryAfter(%q) = %v,%v but padded = %v,%v", s, d, ok, d2, ok2)
		}
		// A negative number is never a wait.
		if strings.HasPrefix(strings.TrimSpace(s), "-") && decimalSeconds.MatchString(strings.TrimSpace(s)) && ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v; negative must be absent", s, d)
		}
	})
}
