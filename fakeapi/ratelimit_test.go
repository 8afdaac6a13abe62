package fakeapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want []fakeapi.RateLimit
		text string
	}{
		{"10/s", []fakeapi.RateLimit{{10, time.Second}}, "10/s"},
		{"600/m", []fakeapi.RateLimit{{600, time.Minute}}, "600/m"},
		{"36000/h", []fakeapi.RateLimit{{36000, time.Hour}}, "36000/h"},
		{"1/h", []fakeapi.RateLimit{{1, time.Hour}}, "1/h"},
		{"10/s,500/m", []fakeapi.RateLimit{{10, time.Second}, {500, time.Minute}}, "10/s,500/m"},
		{" 10 / s , 500/m ", []fakeapi.RateLimit{{10, time.Second}, {500, time.Minute}}, "10/s,500/m"},
		{"1000000000/s", []fakeapi.RateLimit{{1_000_000_000, time.Second}}, "1000000000/s"},
	}
	for _, tc := range good {
		got, err := fakeapi.ParseRate(tc.in)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", tc.in, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ParseRate(%q) = %v, want %v", tc.in, got, tc.want)
		}
		var parts []string
		for _, l := range got {
			parts = append(parts, l.String())
		}
		if text := strings.Join(parts, ","); text != tc.text {
			t.Errorf("ParseRate(%q) renders as %q, want %q", tc.in, text, tc.text)
		}
	}

	bad := []struct{ in, want string }{
		{"", "rate is empty"},
		{"  ", "rate is empty"},
		{"0", `rate "0": no "/UNIT"`},
		{"abc", `rate "abc": no "/UNIT"`},
		{"10/", `rate "10/": no unit after the /`},
		{"/s", `rate "/s": no count before the /`},
		{"-1/s", `rate "-1/s": count -1 is not positive`},
		{"0/s", `rate "0/s": count 0 is not positive`},
		{"1.5/s", `rate "1.5/s": count "1.5" is not a whole number`},
		{"ten/s", `rate "ten/s": count "ten" is not a whole number`},
		{"10/fortnight", `rate "10/fortnight": unit "fortnight" is not s, m or h`},
		{"10/S", `unit "S" is not s, m or h`},
		{"10/1s", `unit "1s" is not s, m or h`},
		{"10/s/m", `unit "s/m" is not s, m or h`},
		{"1000000001/s", "count 1000000001 is too large"},
		{"99999999999999999999/s", "count 99999999999999999999 is too large"},
		{"10/s,,5/m", `rate "10/s,,5/m" has an empty item between commas`},
		{"10/s,", "has an empty item between commas"},
		{"10/s,10/fortnight", `rate "10/fortnight": unit "fortnight"`},
	}
	for _, tc := range bad {
		got, err := fakeapi.ParseRate(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRate(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseRate(%q): error is not one line: %q", tc.in, err)
		}
	}
}

func TestRateLimitString(t *testing.T) {
	t.Parallel()
	for l, want := range map[fakeapi.RateLimit]string{
		{10, time.Second}:           "10/s",
		{600, time.Minute}:          "600/m",
		{36000, time.Hour}:          "36000/h",
		{5, 500 * time.Millisecond}: "5/500ms",
	} {
		if got := l.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", l, got, want)
		}
	}
}

func TestNewRefusesAnInvalidRate(t *testing.T) {
	t.Parallel()
	for _, l := range []fakeapi.RateLimit{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, -time.Second}, {2_000_000_000, time.Second}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New with Rate %#v did not panic", l)
				}
			}()
			fakeapi.New(fakeapi.Config{Rate: []fakeapi.RateLimit{l}}).Close()
		}()
	}
}

// rateFake starts a fake limited by rate on an injected clock.
func rateFake(t *testing.T, rate string, cfg fakeapi.Config) (*fakeapi.Server, string, *clock) {
	t.Helper()
	limits, err := fakeapi.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	cfg.Rate, cfg.Now = limits, clk.Now
	srv, url := startTest(t, cfg)
	return srv, url, clk
}

// statuses sends n GET /emails with the API key and returns their statuses
// as text, "200 200 429".
func statuses(t *testing.T, url, apiKey string, n int) string {
	t.Helper()
	var out []string
	for range n {
		r := do(t, url, http.MethodGet, "/emails", nil, headers("Authorization", "Bearer "+apiKey))
		out = append(out, fmt.Sprint(r.status))
	}
	return strings.Join(out, " ")
}

func want(t *testing.T, step, got, wanted string) {
	t.Helper()
	if got != wanted {
		t.Fatalf("%s: statuses %s, want %s", step, got, wanted)
	}
}

func TestRateBucketAdmitsCapacityThenRefillRate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rate     string
		capacity int
	}{
		{"10/s", 10},    // a token every 100 ms
		{"600/m", 10},   // the same
		{"36000/h", 10}, // the same
		{"5/m", 1},      // a token every 12 s
		{"90/m", 1},     // 1.5/s: a bucket of one whole token, one every 666.67 ms
		{"3/s", 3},      // one every 333.33 ms: exact, not rounded token by token
	}
	for _, tc := range cases {
		t.Run(tc.rate, func(t *testing.T) {
			srv, url, clk := rateFake(t, tc.rate, fakeapi.Config{})
			burst := strings.TrimSpace(strings.Repeat("200 ", tc.capacity))
			want(t, "full bucket", statuses(t, url, testKey, tc.capacity+2), burst+" 429 429")

			// Token k comes k×Per/Count after the burst (rounded up to the
			// nanosecond): not a nanosecond before, and one at a time. A
			// bucket of one token is full the moment its token comes, so
			// what it would gain past that is lost: there each token comes
			// Per/Count after the one before was taken.
			limits, _ := fakeapi.ParseRate(tc.rate)
			l := limits[0]
			var elapsed time.Duration
			for k := int64(1); k <= 3; k++ {
				due := time.Duration((k*int64(l.Per) + int64(l.Count) - 1) / int64(l.Count))
				if tc.capacity == 1 {
					due = elapsed + time.Duration((int64(l.Per)+int64(l.Count)-1)/int64(l.Count))
				}
				clk.Add(due - time.Nanosecond - elapsed)
				want(t, fmt.Sprintf("token %d, 1ns early", k), statuses(t, url, testKey, 1), "429")
				clk.Add(time.Nanosecond)
				elapsed = due
				want(t, fmt.Sprintf("token %d", k), statuses(t, url, testKey, 2), "200 429")
			}

			// A long pause fills the bucket to its capacity, no more.
			clk.Add(time.Hour)
			want(t, "after an hour", statuses(t, url, testKey, tc.capacity+1), burst+" 429")

			if got, wanted := srv.RateLimited(), 2+3+3+1; got != wanted {
				t.Errorf("RateLimited() = %d, want %d", got, wanted)
			}
		})
	}
}

func TestRateRefusalsSpendNoToken(t *testing.T) {
	t.Parallel()
	_, url, clk := rateFake(t, "10/s", fakeapi.Config{})
	want(t, "burst", statuses(t, url, testKey, 10), "200 200 200 200 200 200 200 200 200 200")
	want(t, "hammering", statuses(t, url, testKey, 20), strings.TrimSpace(strings.Repeat("429 ", 20)))
	// Had the refusals run the bucket into debt, this token would not be there.
	clk.Add(100 * time.Millisecond)
	want(t, "next token", statuses(t, url, testKey, 2), "200 429")
}

func TestRateEveryLimitMustHold(t *testing.T) {
	t.Parallel()
	// 2/s alone would admit a burst of 2; 30/m holds one token (half a
	// second's worth, at least one) and refills one every 2 s.
	_, url, clk := rateFake(t, "2/s,30/m", fakeapi.Config{})
	want(t, "burst", statuses(t, url, testKey, 2), "200 429")
	clk.Add(time.Second)
	want(t, "2/s has tokens, 30/m not", statuses(t, url, testKey, 1), "429")
	clk.Add(time.Second)
	want(t, "both have", statuses(t, url, testKey, 2), "200 429")

	// The other way round: 1/s binds, 120/m (2 tokens, 2/s) would not.
	_, url, clk = rateFake(t, "1/s,120/m", fakeapi.Config{})
	want(t, "burst", statuses(t, url, testKey, 2), "200 429")
	clk.Add(500 * time.Millisecond)
	want(t, "120/m has tokens, 1/s not", statuses(t, url, testKey, 1), "429")
	clk.Add(500 * time.Millisecond)
	want(t, "both have", statuses(t, url, testKey, 2), "200 429")
}

func TestRateIsPerAPIKey(t *testing.T) {
	t.Parallel()
	srv, url, clk := rateFake(t, "2/s", fakeapi.Config{})
	const other = "oe_live_9d8e7f"
	want(t, "first key", statuses(t, url, testKey, 3), "200 200 429")
	want(t, "second key", statuses(t, url, other, 3), "200 200 429")
	want(t, "first key still", statuses(t, url, testKey, 1), "429")
	clk.Add(500 * time.Millisecond)
	want(t, "first key refilled", statuses(t, url, testKey, 2), "200 429")
	want(t, "second key refilled", statuses(t, url, other, 2), "200 429")
	if got := srv.RateLimited(); got != 5 {
		t.Errorf("RateLimited() = %d, want 5", got)
	}
}

func TestRateCountsAuthenticatedRequestsOnly(t *testing.T) {
	t.Parallel()
	_, url, _ := rateFake(t, "1/s", fakeapi.Config{})
	// Control endpoints and requests refused by authentication spend nothing.
	for range 3 {
		wantStatus(t, do(t, url, http.MethodGet, "/_fake/health", nil, http.Header{}), http.StatusOK)
		wantStatus(t, do(t, url, http.MethodGet, "/emails", nil, headers("Authorization", "")), http.StatusUnauthorized)
		wantStatus(t, do(t, url, http.MethodGet, "/emails", nil, headers("Authorization", "Bearer oe_bad")), http.StatusUnauthorized)
	}
	// Every authenticated request does, even one the API refuses: a 404
	// spends the token, and the next request is over the limit.
	wantError(t, do(t, url, http.MethodGet, "/nothing", nil, headers()), http.StatusNotFound, "not_found_error", "not_found")
	wantError(t, do(t, url, http.MethodGet, "/emails", nil, headers()), http.StatusTooManyRequests, "rate_limit_error", "rate_limited")
	// A refused request is not routed: a 404 path over the limit is 429 too.
	wantError(t, do(t, url, http.MethodGet, "/nothing", nil, headers()), http.StatusTooManyRequests, "rate_limit_error", "rate_limited")
}

func TestRate429BodyAndHeadersByDefault(t *testing.T) {
	t.Parallel()
	_, url, _ := rateFake(t, "1/s", fakeapi.Config{})
	ok := do(t, url, http.MethodGet, "/emails", nil, headers())
	wantStatus(t, ok, http.StatusOK)
	r := do(t, url, http.MethodGet, "/emails", nil, headers())
	wantError(t, r, http.StatusTooManyRequests, "rate_limit_error", "rate_limited")
	id := r.header.Get("X-Request-Id")
	wantBody := `{"error":{"code":"rate_limited","message":"Too many requests: this API key is over its rate limit of 1/s. The request was not processed.","param":null,"requestId":"` + id + `","type":"rate_limit_error"}}`
	if string(r.raw) != wantBody {
		t.Errorf("body\n%s\nwant\n%s", r.raw, wantBody)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	for _, res := range []result{ok, r} {
		for _, h := range []string{"Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "X-RateLimit-Limit"} {
			if v := res.header.Values(h); len(v) > 0 {
				t.Errorf("status %d carries %s: %v (the API sends none by default)", res.status, h, v)
			}
		}
	}
}

// rateHeaders renders the limiter's headers of an answer, "" for one not sent.
func rateHeaders(r result) string {
	return fmt.Sprintf("%d retry-after=%s limit=%s remaining=%s reset=%s", r.status,
		r.header.Get("Retry-After"), r.header.Get("RateLimit-Limit"),
		r.header.Get("RateLimit-Remaining"), r.header.Get("RateLimit-Reset"))
}

func TestRateRetryAfterAndHeaders(t *testing.T) {
	t.Parallel()
	get := func(t *testing.T, url string) string {
		t.Helper()
		return rateHeaders(do(t, url, http.MethodGet, "/emails", nil, headers()))
	}

	t.Run("retry-after only", func(t *testing.T) {
		_, url, clk := rateFake(t, "5/m", fakeapi.Config{RateRetryAfter: true})
		for _, step := range []struct {
			advance time.Duration
			want    string
		}{
			{0, "200 retry-after= limit= remaining= reset="},
			{0, "429 retry-after=12 limit= remaining= reset="},
			{2500 * time.Millisecond, "429 retry-after=10 limit= remaining= reset="}, // 9.5 s, rounded up
			{9 * time.Second, "429 retry-after=1 limit= remaining= reset="},          // 0.5 s, rounded up
			{500 * time.Millisecond, "200 retry-after= limit= remaining= reset="},
		} {
			clk.Add(step.advance)
			if got := get(t, url); got != step.want {
				t.Fatalf("after %s: %s, want %s", step.advance, got, step.want)
			}
		}
	})

	t.Run("headers only", func(t *testing.T) {
		_, url, clk := rateFake(t, "10/s", fakeapi.Config{RateHeaders: true})
		if got := get(t, url); got != "200 retry-after= limit=10 remaining=9 reset=1" {
			t.Fatalf("first: %s", got)
		}
		for range 8 {
			get(t, url)
		}
		if got := get(t, url); got != "200 retry-after= limit=10 remaining=0 reset=1" {
			t.Fatalf("tenth: %s", got)
		}
		if got := get(t, url); got != "429 retry-after= limit=10 remaining=0 reset=1" {
			t.Fatalf("refused: %s", got)
		}
		clk.Add(time.Second)
		if got := get(t, url); got != "200 retry-after= limit=10 remaining=9 reset=1" {
			t.Fatalf("refilled: %s", got)
		}
	})

	t.Run("both, several limits", func(t *testing.T) {
		// 5/m is the limit closest to refusing, so the fields describe it.
		_, url, clk := rateFake(t, "10/s,5/m", fakeapi.Config{RateHeaders: true, RateRetryAfter: true})
		if got := get(t, url); got != "200 retry-after= limit=1 remaining=0 reset=12" {
			t.Fatalf("first: %s", got)
		}
		clk.Add(4 * time.Second)
		if got := get(t, url); got != "429 retry-after=8 limit=1 remaining=0 reset=8" {
			t.Fatalf("refused: %s", got)
		}
		clk.Add(8 * time.Second)
		if got := get(t, url); got != "200 retry-after= limit=1 remaining=0 reset=12" {
			t.Fatalf("after the wait: %s", got)
		}
	})

	t.Run("other errors carry the fields", func(t *testing.T) {
		_, url, _ := rateFake(t, "10/s", fakeapi.Config{RateHeaders: true})
		r := do(t, url, http.MethodGet, "/nothing", nil, headers())
		if got := rateHeaders(r); got != "404 retry-after= limit=10 remaining=9 reset=1" {
			t.Fatalf("404: %s", got)
		}
	})
}

func TestRateRefusedSendIsNotProcessed(t *testing.T) {
	t.Parallel()
	// A fault waits for k2: the limiter must refuse k2 before the fault
	// sees it, so the fault's single firing is still there afterwards.
	srv, url, clk := rateFake(t, "1/s", fakeapi.Config{
		Faults: []fakeapi.Fault{{Kind: fakeapi.FaultErrorBefore, Status: 503, Times: 1, Key: "k2"}},
	})
	first := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), headers("Idempotency-Key", "k1"))
	wantStatus(t, first, http.StatusOK)

	refused := do(t, url, http.MethodPost, "/emails", email("bob@example.com"), headers("Idempotency-Key", "k2"))
	wantError(t, refused, http.StatusTooManyRequests, "rate_limit_error", "rate_limited")
	if n := len(srv.Deliveries()); n != 1 {
		t.Fatalf("a refused send delivered: %d deliveries", n)
	}

	clk.Add(time.Second)
	faulted := do(t, url, http.MethodPost, "/emails", email("bob@example.com"), headers("Idempotency-Key", "k2"))
	wantStatus(t, faulted, http.StatusServiceUnavailable)

	// The key was never claimed: the send after the limit lifts is a fresh
	// send, not a replay.
	clk.Add(time.Second)
	sent := do(t, url, http.MethodPost, "/emails", email("bob@example.com"), headers("Idempotency-Key", "k2"))
	wantStatus(t, sent, http.StatusOK)
	if sent.body["replayed"] != false {
		t.Fatalf("the send after the limit lifted was a replay: %s", sent.raw)
	}
	ds := srv.DeliveriesTo("bob@example.com")
	if len(ds) != 1 || ds[0].IdempotencyKey != "k2" || ds[0].MessageID != sent.body["id"] {
		t.Fatalf("deliveries to bob %+v", ds)
	}

	// The request log tells the limiter's 429 from a fault's.
	rs := srv.Requests()
	if len(rs) != 4 {
		t.Fatalf("%d requests logged, want 4", len(rs))
	}
	for i, want := range []struct {
		status      int
		rateLimited bool
		fault       string
	}{
		{200, false, ""},
		{429, true, ""},
		{503, false, "error_before=503;times=1;key=k2"},
		{200, false, ""},
	} {
		r := rs[i]
		if r.Status != want.status || r.RateLimited != want.rateLimited || r.Fault != want.fault ||
			r.IdempotencyKey != []string{"k1", "k2", "k2", "k2"}[i] || r.RetryAfter != "" {
			t.Errorf("request %d: %+v, want status %d rateLimited %v fault %q", i, r, want.status, want.rateLimited, want.fault)
		}
	}
}

func TestRateLimitedIsDistinctFromTheFault(t *testing.T) {
	t.Parallel()
	srv, url, _ := rateFake(t, "10/s", fakeapi.Config{RateRetryAfter: true})
	r := do(t, url, http.MethodPost, "/emails", email("a@example.com"), headers("X-Fake-Fault", "rate_limit"))
	wantError(t, r, http.StatusTooManyRequests, "rate_limit_error", "rate_limited")
	if r.header.Get("Retry-After") != "" {
		t.Error("the rate_limit fault sent Retry-After: the option is the limiter's")
	}
	rs := srv.Requests()
	if len(rs) != 1 || rs[0].RateLimited || rs[0].Fault != "rate_limit" {
		t.Fatalf("request log %+v", rs)
	}
	if n := srv.RateLimited(); n != 0 {
		t.Fatalf("RateLimited() = %d after an injected fault, want 0", n)
	}
}

func TestRateInRequestLogAndReset(t *testing.T) {
	t.Parallel()
	srv, url, _ := rateFake(t, "1/h", fakeapi.Config{RateRetryAfter: true})
	want(t, "before reset", statuses(t, url, testKey, 3), "200 429 429")

	r := do(t, url, http.MethodGet, "/_fake/requests", nil, http.Header{})
	var log struct {
		Data        []fakeapi.RequestRecord
		RateLimited int
	}
	if err := json.Unmarshal(r.raw, &log); err != nil {
		t.Fatal(err)
	}
	if log.RateLimited != 2 || len(log.Data) != 3 || log.Data[0].RateLimited || !log.Data[1].RateLimited ||
		log.Data[1].RetryAfter != "3600" || !strings.Contains(string(r.raw), `"rateLimited":true`) {
		t.Fatalf("/_fake/requests %s", r.raw)
	}

	wantStatus(t, do(t, url, http.MethodPost, "/_fake/reset", nil, http.Header{}), http.StatusOK)
	if n := srv.RateLimited(); n != 0 {
		t.Fatalf("RateLimited() = %d after reset", n)
	}
	want(t, "after reset", statuses(t, url, testKey, 2), "200 429")
	srv.Reset()
	want(t, "after Reset", statuses(t, url, testKey, 2), "200 429")
}

func TestRateOffByDefault(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{RateHeaders: true, RateRetryAfter: true})
	for range 50 {
		r := do(t, url, http.MethodGet, "/emails", nil, headers())
		wantStatus(t, r, http.StatusOK)
		if r.header.Get("RateLimit-Limit") != "" || r.header.Get("Retry-After") != "" {
			t.Fatal("RateLimit fields without a Rate")
		}
	}
	if srv.RateLimited() != 0 {
		t.Fatal("requests limited without a Rate")
	}
}

func ExampleParseRate() {
	limits, err := fakeapi.ParseRate("10/s, 500/m")
	fmt.Println(limits, err)
	_, err = fakeapi.ParseRate("10/fortnight")
	fmt.Println(err)
	// Output:
	// [10/s 500/m] <nil>
	// rate "10/fortnight": unit "fortnight" is not s, m or h
}
