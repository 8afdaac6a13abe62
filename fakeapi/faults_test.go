package fakeapi_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestParseFault(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rule      string
		want      fakeapi.Fault
		canonical string
	}{
		{"drop_after", fakeapi.Fault{Kind: fakeapi.FaultDropAfter}, "drop_after"},
		{"drop_after:p=0.2", fakeapi.Fault{Kind: fakeapi.FaultDropAfter, P: 0.2}, "drop_after;p=0.2"},
		{"error_before", fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 503}, "error_before=503"},
		{"error_before=503:times=2:to=flaky@", fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 503, Times: 2, To: "flaky@"},
			"error_before=503;times=2;to=flaky@"},
		{"error_before=502;times=2", fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 502, Times: 2}, "error_before=502;times=2"},
		{"error_after:status=500", fakeapi.Fault{Kind: fakeapi.FaultErrorAfter, Status: 500}, "error_after=500"},
		{"latency=250ms;path=/emails/*;method=get", fakeapi.Fault{Kind: fakeapi.FaultLatency, Delay: 250 * time.Millisecond, Path: "/emails/*", Method: "GET"},
			"latency=250ms;path=/emails/*;method=GET"},
		{"latency_after=30s:key=invoice:inv_1", fakeapi.Fault{Kind: fakeapi.FaultLatencyAfter, Delay: 30 * time.Second, Key: "invoice:inv_1"},
			"latency_after=30s;key=invoice:inv_1"},
		{"rate_limit:p=1", fakeapi.Fault{Kind: fakeapi.FaultRateLimit}, "rate_limit"},
		{"retry_after=1.5", fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, Status: 429, RetryAfter: "1.5"}, "retry_after=1.5;status=429"},
		{"retry_after=date+5s:status=503", fakeapi.Fault{Kind: fakeapi.FaultRetryAfter, Status: 503, RetryAfter: "date+5s"}, "retry_after=date+5s;status=503"},
		{"reject", fakeapi.Fault{Kind: fakeapi.FaultReject, Code: "recipient_rejected"}, "reject=recipient_rejected"},
		{"reject=suppressed:to=bounced@:times=2", fakeapi.Fault{Kind: fakeapi.FaultReject, Code: "suppressed", To: "bounced@", Times: 2},
			"reject=suppressed;times=2;to=bounced@"},
	}
	for _, tc := range cases {
		got, err := fakeapi.ParseFault(tc.rule)
		if err != nil {
			t.Errorf("ParseFault(%q): %v", tc.rule, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFault(%q) = %+v, want %+v", tc.rule, got, tc.want)
		}
		if got.String() != tc.canonical {
			t.Errorf("String() = %q, want %q", got.String(), tc.canonical)
		}
		if back, err := fakeapi.ParseFault(got.String()); err != nil || !reflect.DeepEqual(back, got) {
			t.Errorf("round trip of %q: %+v, %v", got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "explode", "latency", "latency=soon", "drop_after=1", "error_before=200",
		"retry_after", "retry_after=later", "drop_after:status=503", "drop_after:p=2", "drop_after:times=-1", "drop_after:color=red",
		"reject=", "reject=not-a-code", "reject:status=422"} {
		if _, err := fakeapi.ParseFault(bad); err == nil {
			t.Errorf("ParseFault(%q) accepted", bad)
		}
	}
	list, err := fakeapi.ParseFaults("drop_after;p=0.1, latency=1s\nrate_limit")
	if err != nil || len(list) != 3 {
		t.Fatalf("ParseFaults: %v %v", list, err)
	}
}

func TestErrorBeforeTwiceThenSuccessPerKey(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	for _, key := range []string{"k1", "k2"} {
		h := headers("Idempotency-Key", key, "X-Fake-Fault", "error_before=503;times=2")
		for attempt := 1; attempt <= 2; attempt++ {
			r := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
			wantError(t, r, http.StatusServiceUnavailable, "api_error", "service_unavailable")
			if n := len(srv.Deliveries()); n != map[string]int{"k1": 0, "k2": 1}[key] {
				t.Fatalf("key %s attempt %d: error_before delivered (%d)", key, attempt, n)
			}
		}
		r := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
		wantStatus(t, r, http.StatusOK)
		if r.body["replayed"] != false {
			t.Fatalf("third attempt: %s", r.raw)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 6 || reqs[0].Fault != "error_before=503;times=2" || reqs[2].Fault != "" {
		t.Fatalf("request log %+v", reqs)
	}
}

func TestConfiguredFaultMatchesRecipient(t *testing.T) {
	t.Parallel()
	faults, err := fakeapi.ParseFaults("error_before=502:times=1:to=flaky@")
	if err != nil {
		t.Fatal(err)
	}
	srv, url := startTest(t, fakeapi.Config{Faults: faults})
	wantStatus(t, do(t, url, http.MethodPost, "/emails", email("steady@example.com"), nil), http.StatusOK)
	batch := map[string]any{"emails": []any{email("ann@example.com"), email("FLAKY@example.com")}}
	wantError(t, do(t, url, http.MethodPost, "/emails/batch", batch, nil), http.StatusBadGateway, "api_error", "bad_gateway")
	wantStatus(t, do(t, url, http.MethodPost, "/emails/batch", batch, nil), http.StatusOK)
	if n := len(srv.Deliveries()); n != 3 {
		t.Fatalf("deliveries = %d, want 3", n)
	}
}

func TestFaultMatchers(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	if err := srv.SetFaults(
		fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 500, Path: "/templates/*/send"},
		fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: 504, Key: "job:"},
		fakeapi.Fault{Kind: fakeapi.FaultRateLimit, Method: "GET"},
	); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, do(t, url, http.MethodPost, "/templates/welcome/send", email("a@example.com"), nil), http.StatusInternalServerError)
	wantStatus(t, do(t, url, http.MethodPost, "/emails", email("a@example.com"), headers("Idempotency-Key", "job:7")), http.StatusGatewayTimeout)
	wantStatus(t, do(t, url, http.MethodPost, "/emails", email("a@example.com"), headers("Idempotency-Key", "other")), http.StatusOK)
	wantStatus(t, do(t, url, http.MethodGet, "/emails", nil, nil), http.StatusTooManyRequests)
	if err := srv.SetFaults(fakeapi.Fault{Kind: "explode"}); err == nil {
		t.Fatal("SetFaults accepted an unknown kind")
	}
	if err := srv.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultDropAfter, Code: "suppressed"}); err == nil {
		t.Fatal("SetFaults accepted a code on drop_after")
	}
	if len(srv.Faults()) != 3 {
		t.Fatal("a refused SetFaults changed the rules")
	}
}

// noKeepAlive is a client whose every request has its own connection, so a
// dropped connection surfaces as an error instead of being retried silently
// by net/http (it replays requests carrying Idempotency-Key that fail on a
// reused connection).
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func TestDropAfterThenRetryReplays(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	h := headers("Idempotency-Key", "invoice:1", "X-Fake-Fault", "drop_after;times=1")
	_, err := doWith(noKeepAlive, context.Background(), url, http.MethodPost, "/emails", email("ann@example.com"), h)
	if err == nil {
		t.Fatal("the dropped request got an answer")
	}
	ds := srv.Deliveries()
	if len(ds) != 1 {
		t.Fatalf("deliveries after drop = %d, want 1 (delivered, answer lost)", len(ds))
	}
	r, err := doWith(noKeepAlive, context.Background(), url, http.MethodPost, "/emails", email("ann@example.com"), h)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, r, http.StatusOK)
	if r.body["replayed"] != true || r.body["id"] != ds[0].MessageID {
		t.Fatalf("retry %s, delivered %s", r.raw, ds[0].MessageID)
	}
	if n := len(srv.Deliveries()); n != 1 {
		t.Fatalf("deliveries = %d, want 1", n)
	}
	reqs := srv.Requests()
	if !reqs[0].Dropped || reqs[0].Status != 0 || reqs[0].Fault != "drop_after;times=1" || !reqs[1].Replayed {
		t.Fatalf("request log %+v", reqs)
	}
}

func TestErrorAfterDeliversAndLosesTheAnswer(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	h := headers("Idempotency-Key", "k", "X-Fake-Fault", "error_after=502;times=1")
	r := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
	wantError(t, r, http.StatusBadGateway, "api_error", "bad_gateway")
	r = do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
	if r.body["replayed"] != true || len(srv.Deliveries()) != 1 {
		t.Fatalf("retry after error_after: %s, %d deliveries", r.raw, len(srv.Deliveries()))
	}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	start := time.Now()
	r := do(t, url, http.MethodGet, "/emails", nil, headers("X-Fake-Fault", "latency=60ms"))
	wantStatus(t, r, http.StatusOK)
	if took := time.Since(start); took < 60*time.Millisecond {
		t.Fatalf("answered in %v, before the latency", took)
	}

	// A latency longer than the client's patience: the client times out, the
	// fake stops waiting with it and handles nothing.
	impatient := &http.Client{Timeout: 50 * time.Millisecond}
	_, err := doWith(impatient, context.Background(), url, http.MethodPost, "/emails", email("ann@example.com"),
		headers("X-Fake-Fault", "latency=1m"))
	if err == nil {
		t.Fatal("no timeout")
	}
	if err := srv.WaitRequests(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	if rec := srv.Requests()[1]; rec.Status != 499 || rec.Fault != "latency=1m0s" {
		t.Fatalf("request log %+v", rec)
	}
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("a request abandoned during latency delivered %d", n)
	}
}

func TestLatencyAfterIsTheWindowToKillAWorker(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	h := headers("Idempotency-Key", "job-9", "X-Fake-Fault", "latency_after=1m;times=1")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := doWith(noKeepAlive, ctx, url, http.MethodPost, "/emails", email("ann@example.com"), h)
		errc <- err
	}()
	if err := srv.WaitDeliveries(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel() // the worker dies with the request in flight
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error = %v", err)
	}
	// The replay goes once the killed request has ended, as a worker's
	// replay comes after its crash. Sent at once, it could reach the fake
	// between the first request's delivery and its after-phase, and take
	// the times=1 latency for itself.
	waitFor(t, "the killed request to end", func() bool {
		reqs := srv.Requests()
		return len(reqs) == 1 && !reqs[0].AnsweredAt.IsZero()
	})
	r := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
	if r.body["replayed"] != true || len(srv.Deliveries()) != 1 {
		t.Fatalf("after the kill: %s, %d deliveries", r.raw, len(srv.Deliveries()))
	}
	if err := srv.WaitRequests(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	// The log is in the order requests ended, and the killed one may end
	// after its replay: look for it by its status.
	var statuses []int
	for _, rec := range srv.Requests() {
		statuses = append(statuses, rec.Status)
	}
	if !reflect.DeepEqual(statuses, []int{499, 200}) && !reflect.DeepEqual(statuses, []int{200, 499}) {
		t.Fatalf("requests ended with statuses %v, want the killed one as 499 and the replay as 200", statuses)
	}
}

func TestRateLimitAndRetryAfter(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv, url := startTest(t, fakeapi.Config{Now: clk.Now})
	r := do(t, url, http.MethodPost, "/emails", email("a@example.com"), headers("X-Fake-Fault", "rate_limit"))
	wantError(t, r, http.StatusTooManyRequests, "rate_limit_error", "rate_limited")
	if _, ok := r.header["Retry-After"]; ok {
		t.Fatal("rate_limit sent Retry-After")
	}

	cases := []struct {
		rule, want string
		status     int
	}{
		{"retry_after=1.5", "1.5", 429},
		{"retry_after=0", "0", 429},
		{"retry_after=120;status=503", "120", 503},
		{"retry_after=date+30s", "Wed, 02 Jan 2030 10:00:30 GMT", 429},
		{"retry_after=date+1500ms;status=503", "Wed, 02 Jan 2030 10:00:02 GMT", 503},
		{"retry_after=date-1m", "Wed, 02 Jan 2030 09:59:00 GMT", 429},
	}
	for _, tc := range cases {
		r := do(t, url, http.MethodPost, "/emails", email("a@example.com"), headers("X-Fake-Fault", tc.rule))
		wantStatus(t, r, tc.status)
		if got := r.header.Get("Retry-After"); got != tc.want {
			t.Errorf("%s: Retry-After = %q, want %q", tc.rule, got, tc.want)
		}
	}
	reqs := srv.Requests()
	if last := reqs[len(reqs)-1]; last.RetryAfter != "Wed, 02 Jan 2030 09:59:00 GMT" || last.Status != 429 {
		t.Fatalf("request log %+v", last)
	}
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("refused requests delivered %d", n)
	}
}

// faultPattern sends n reads and returns which of them failed.
func faultPattern(t *testing.T, url string, n int) string {
	var b strings.Builder
	for range n {
		if do(t, url, http.MethodGet, "/emails", nil, nil).status == http.StatusOK {
			b.WriteByte('.')
		} else {
			b.WriteByte('X')
		}
	}
	return b.String()
}

func TestSeededProbabilityIsReproducible(t *testing.T) {
	t.Parallel()
	faults, _ := fakeapi.ParseFaults("error_before=503:p=0.5")
	a, urlA := startTest(t, fakeapi.Config{Seed: 42, Faults: faults})
	_, urlB := startTest(t, fakeapi.Config{Seed: 42, Faults: faults})
	_, urlC := startTest(t, fakeapi.Config{Seed: 7, Faults: faults})
	if a.Seed() != 42 {
		t.Fatalf("Seed() = %d", a.Seed())
	}
	pa, pb, pc := faultPattern(t, urlA, 40), faultPattern(t, urlB, 40), faultPattern(t, urlC, 40)
	if pa != pb {
		t.Fatalf("same seed, different faults:\n%s\n%s", pa, pb)
	}
	if pa == pc {
		t.Fatalf("seeds 42 and 7 gave the same 40 draws: %s", pa)
	}
	if !strings.Contains(pa, "X") || !strings.Contains(pa, ".") {
		t.Fatalf("p=0.5 never or always fired: %s", pa)
	}
	a.Reset()
	if again := faultPattern(t, urlA, 40); again != pa {
		t.Fatalf("after Reset the sequence changed:\n%s\n%s", pa, again)
	}
	if picked := fakeapi.New(fakeapi.Config{}); picked.Seed() == 0 {
		t.Error("no seed picked")
	} else {
		picked.Close()
	}
}

func TestFaultsOverHTTP(t *testing.T) {
	t.Parallel()
	initial, _ := fakeapi.ParseFaults("latency=1ms")
	_, url := startTest(t, fakeapi.Config{Seed: 3, Faults: initial})
	r := do(t, url, http.MethodPost, "/_fake/faults",
		`{"faults":["error_before=502:method=GET:path=/emails","drop_after;p=0.25"],"seed":9}`, http.Header{})
	wantStatus(t, r, http.StatusOK)
	if got := r.body["faults"].([]any); len(got) != 2 || got[0] != "error_before=502;path=/emails;method=GET" || r.body["seed"] != 9.0 {
		t.Fatalf("POST /_fake/faults answered %s", r.raw)
	}
	wantStatus(t, do(t, url, http.MethodGet, "/emails", nil, nil), http.StatusBadGateway)

	r = do(t, url, http.MethodPost, "/_fake/faults", `{"faults":["explode"]}`, http.Header{})
	wantError(t, r, http.StatusBadRequest, "invalid_request_error", "invalid_fault")
	r = do(t, url, http.MethodGet, "/_fake/faults", nil, http.Header{})
	if len(r.body["faults"].([]any)) != 2 {
		t.Fatalf("a refused POST changed the rules: %s", r.raw)
	}

	wantStatus(t, do(t, url, http.MethodPost, "/_fake/reset", nil, http.Header{}), http.StatusOK)
	r = do(t, url, http.MethodGet, "/_fake/faults", nil, http.Header{})
	if got := r.body["faults"].([]any); len(got) != 1 || got[0] != "latency=1ms" {
		t.Fatalf("after reset: %s", r.raw)
	}
	wantStatus(t, do(t, url, http.MethodGet, "/emails", nil, nil), http.StatusOK)
}

func TestInvalidFaultHeader(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	r := do(t, url, http.MethodPost, "/emails", email("a@example.com"), headers("X-Fake-Fault", "explode"))
	wantError(t, r, http.StatusBadRequest, "invalid_request_error", "invalid_fault", "X-Fake-Fault")
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("delivered %d", n)
	}
}
