package client

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

// The client reads every rate-limit header form servers send (issue 23,
// item 4), on successes and errors alike.
func TestParseRateInfo(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   RateInfo
	}{
		{"draft fields with a policy", map[string]string{"RateLimit-Limit": "20", "RateLimit-Remaining": "0", "RateLimit-Reset": "1", "RateLimit-Policy": "20;w=1, 500;w=86400"},
			RateInfo{Limit: 20, Remaining: 0, HasRemaining: true, Reset: time.Second, Window: time.Second, Fields: "RateLimit-*"}},
		{"draft 03 limit with policies", map[string]string{"RateLimit-Limit": "10, 10;w=1, 1000;w=3600", "RateLimit-Remaining": "4"},
			RateInfo{Limit: 10, Remaining: 4, HasRemaining: true, Window: time.Second, Fields: "RateLimit-*"}},
		{"draft 08 structured", map[string]string{"RateLimit": `"burst";r=3;t=2, "daily";r=900;t=3600`, "RateLimit-Policy": `"burst";q=50;w=10, "daily";q=1000;w=86400`},
			RateInfo{Limit: 50, Remaining: 3, HasRemaining: true, Reset: 2 * time.Second, Window: 10 * time.Second, Fields: "RateLimit"}},
		{"draft 07 dictionary", map[string]string{"RateLimit": "limit=100, remaining=50, reset=5", "RateLimit-Policy": "100;w=60"},
			RateInfo{Limit: 100, Remaining: 50, HasRemaining: true, Reset: 5 * time.Second, Window: time.Minute, Fields: "RateLimit"}},
		{"X-RateLimit with a Unix reset", map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1700000030"},
			RateInfo{Limit: 5000, Remaining: 0, HasRemaining: true, Reset: 30 * time.Second, Fields: "X-RateLimit-*"}},
		{"X-RateLimit with delay-seconds", map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Reset": "1"},
			RateInfo{Limit: 2, Reset: time.Second, Fields: "X-RateLimit-*"}},
	} {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		got := parseRateInfo(h, now)
		if got == nil {
			t.Errorf("%s: nothing read", tc.name)
			continue
		}
		got.Policies = nil
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, *got, tc.want)
		}
	}
	if r := parseRateInfo(http.Header{"Content-Type": {"application/json"}}, now); r != nil {
		t.Errorf("no rate headers: %+v, want nil", r)
	}
}

func TestQuotaExhausted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		per  string
		isOK bool
	}{
		{&APIError{Status: 429, Type: TypeRateLimit, Code: "daily_quota_exceeded", Message: "You have reached the daily sending quota"}, "day", true},
		{&APIError{Status: 429, Type: TypeRateLimit, Code: "monthly_quota_exceeded"}, "month", true},
		{&APIError{Status: 429, Type: TypeRateLimit, Code: "rate_limited", Message: "Too many requests"}, "", false},
		{&APIError{Status: 429, Type: TypeRateLimit, Code: "rate_limited", RateLimit: &RateInfo{HasRemaining: true, Window: 24 * time.Hour}}, "day", true},
		{&APIError{Status: 422, Code: "daily_quota_exceeded"}, "", false},
	} {
		if per, ok := QuotaExhausted(tc.err); per != tc.per || ok != tc.isOK {
			t.Errorf("%v: %q %t, want %q %t", tc.err, per, ok, tc.per, tc.isOK)
		}
	}
}
