package fakeapi_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestInvalidIdempotencyKey(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	for _, key := range []string{"", "has space", "slash/key", "ключ", strings.Repeat("k", 256)} {
		r := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), headers("Idempotency-Key", key))
		wantError(t, r, http.StatusBadRequest, "invalid_request_error", "invalid_idempotency_key")
	}
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("refused keys delivered %d", n)
	}
	for _, key := range []string{"a", "invoice:inv_4192", "oe-1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed", "A.b_c:D-9", strings.Repeat("k", 255)} {
		r := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), headers("Idempotency-Key", key))
		wantStatus(t, r, http.StatusOK)
	}
}

func TestReplaySameKeySameBody(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	h := headers("Idempotency-Key", "invoice:inv_4192")
	first := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
	wantStatus(t, first, http.StatusOK)
	if first.body["replayed"] != false || first.body["status"] != "sent" {
		t.Fatalf("first answer %s", first.raw)
	}
	// The same body re-encoded (other key order, spacing) is the same request.
	again := `{ "text":"Invoice attached.", "subject":"Your invoice",
	            "to":["ann@example.com"], "from":"Shop <shop@example.com>" }`
	second := do(t, url, http.MethodPost, "/emails", again, h)
	wantStatus(t, second, http.StatusOK)
	if second.body["replayed"] != true || second.body["id"] != first.body["id"] {
		t.Fatalf("replay %s, first %s", second.raw, first.raw)
	}
	if second.header.Get("X-Request-Id") == first.header.Get("X-Request-Id") {
		t.Error("a replay reused the first request id")
	}
	ds := srv.Deliveries()
	if len(ds) != 1 || ds[0].MessageID != first.body["id"] || ds[0].IdempotencyKey != "invoice:inv_4192" {
		t.Fatalf("deliveries %+v", ds)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Replayed || !reqs[1].Replayed {
		t.Fatalf("request log %+v", reqs)
	}
}

func TestReuseWithDifferentBodyOrEndpoint(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	h := headers("Idempotency-Key", "k1")
	wantStatus(t, do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h), http.StatusOK)

	r := do(t, url, http.MethodPost, "/emails", email("bob@example.com"), h)
	wantError(t, r, http.StatusUnprocessableEntity, "validation_error", "idempotency_key_reuse")
	r = do(t, url, http.MethodPost, "/templates/welcome/send", email("ann@example.com"), h)
	wantError(t, r, http.StatusUnprocessableEntity, "validation_error", "idempotency_key_reuse")
	// A used key with an invalid body is a reuse too: the key is checked first.
	r = do(t, url, http.MethodPost, "/emails", with(email("ann@example.com"), "from", nil), h)
	wantError(t, r, http.StatusUnprocessableEntity, "validation_error", "idempotency_key_reuse")
	if n := len(srv.Deliveries()); n != 1 {
		t.Fatalf("deliveries = %d, want 1", n)
	}
}

func TestInvalidSendStoresNoKey(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	h := headers("Idempotency-Key", "k1")
	r := do(t, url, http.MethodPost, "/emails", with(email("ann@example.com"), "to", nil), h)
	wantError(t, r, http.StatusUnprocessableEntity, "validation_error", "missing_field", "to")
	r = do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
	wantStatus(t, r, http.StatusOK)
	if r.body["replayed"] != false || len(srv.Deliveries()) != 1 {
		t.Fatalf("after a refused send the key was not free: %s", r.raw)
	}
}

func TestKeysAreScopedPerAPIKey(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	a := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), headers("Idempotency-Key", "k1"))
	b := do(t, url, http.MethodPost, "/emails", email("ann@example.com"),
		headers("Idempotency-Key", "k1", "Authorization", "Bearer oe_live_other"))
	if a.body["id"] == b.body["id"] || b.body["replayed"] != false || len(srv.Deliveries()) != 2 {
		t.Fatalf("one key under two API keys: %s / %s", a.raw, b.raw)
	}
}

func TestUnkeyedSendsSendEveryTime(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	a := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), nil)
	b := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), nil)
	if a.body["id"] == b.body["id"] || a.body["replayed"] != false || b.body["replayed"] != false {
		t.Fatalf("unkeyed sends: %s / %s", a.raw, b.raw)
	}
	if n := len(srv.Deliveries()); n != 2 {
		t.Fatalf("deliveries = %d, want 2", n)
	}
}

func TestConcurrentRequestsWithOneKeyDeliverOnce(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	const n = 50
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i] = do(t, url, http.MethodPost, "/emails/batch",
				map[string]any{"emails": []any{email("ann@example.com"), email("bob@example.com")}},
				headers("Idempotency-Key", "race"))
		})
	}
	wg.Wait()
	fresh := 0
	for _, r := range results {
		wantStatus(t, r, http.StatusOK)
		if r.body["replayed"] == false {
			fresh++
		}
		if ids(r) != ids(results[0]) {
			t.Fatalf("answers differ: %s vs %s", r.raw, results[0].raw)
		}
	}
	if fresh != 1 {
		t.Errorf("%d answers with replayed false, want 1", fresh)
	}
	if ds := srv.Deliveries(); len(ds) != 2 {
		t.Fatalf("deliveries = %d, want 2 (one per batch email)", len(ds))
	}
}

// ids lists the message ids of a batch answer.
func ids(r result) string {
	var out []string
	data, _ := r.body["data"].([]any)
	for _, item := range data {
		out = append(out, item.(map[string]any)["id"].(string))
	}
	return strings.Join(out, ",")
}

func TestKeyExpiresAfterWindow(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv, url := startTest(t, fakeapi.Config{Now: clk.Now, KeyWindow: time.Hour})
	h := headers("Idempotency-Key", "k1")
	first := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)

	clk.Add(59 * time.Minute)
	r := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
	if r.body["replayed"] != true || r.body["id"] != first.body["id"] {
		t.Fatalf("inside the window: %s", r.raw)
	}
	clk.Add(time.Minute)
	r = do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
	if r.body["replayed"] != false || r.body["id"] == first.body["id"] {
		t.Fatalf("after the window: %s", r.raw)
	}
	clk.Add(time.Hour)
	// Expired, so another body under the key is a new send, not a reuse.
	wantStatus(t, do(t, url, http.MethodPost, "/emails", email("bob@example.com"), h), http.StatusOK)
	if n := len(srv.Deliveries()); n != 3 {
		t.Fatalf("deliveries = %d, want 3", n)
	}
}

func TestBatchReplay(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	body := map[string]any{"emails": []any{email("a@example.com"), email("b@example.com"), email("c@example.com")}}
	h := headers("Idempotency-Key", "batch-1")
	first := do(t, url, http.MethodPost, "/emails/batch", body, h)
	wantStatus(t, first, http.StatusOK)
	if first.body["sent"] != 3.0 || first.body["failed"] != 0.0 || first.body["replayed"] != false {
		t.Fatalf("batch answer %s", first.raw)
	}
	second := do(t, url, http.MethodPost, "/emails/batch", body, h)
	if second.body["replayed"] != true || ids(second) != ids(first) || second.body["sent"] != 3.0 {
		t.Fatalf("batch replay %s, first %s", second.raw, first.raw)
	}
	ds := srv.Deliveries()
	if len(ds) != 3 {
		t.Fatalf("deliveries = %d, want 3", len(ds))
	}
	for _, d := range ds {
		if d.Kind != fakeapi.KindBatch || d.IdempotencyKey != "batch-1" {
			t.Errorf("delivery %+v", d)
		}
	}
}
