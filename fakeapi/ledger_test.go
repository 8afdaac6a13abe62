package fakeapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestLedgerOverHTTP(t *testing.T) {
	t.Parallel()
	_, url := startTest(t, fakeapi.Config{})
	sent := do(t, url, http.MethodPost, "/emails", with(email("Ann <ann@example.com>"), "cc", []string{"carl@example.com"}),
		headers("Idempotency-Key", "k-ann"))
	do(t, url, http.MethodPost, "/templates/welcome/send", with(email("bob@example.com"), "text", nil), nil)
	do(t, url, http.MethodGet, "/emails", nil, nil)

	// No Authorization: the control endpoints are open.
	r := do(t, url, http.MethodGet, "/_fake/deliveries", nil, http.Header{})
	wantStatus(t, r, http.StatusOK)
	var ledger struct{ Data []fakeapi.Delivery }
	if err := json.Unmarshal(r.raw, &ledger); err != nil {
		t.Fatal(err)
	}
	if len(ledger.Data) != 2 {
		t.Fatalf("ledger %s", r.raw)
	}
	d := ledger.Data[0]
	if d.MessageID != sent.body["id"] || d.Kind != fakeapi.KindEmail || d.IdempotencyKey != "k-ann" ||
		d.From != "Shop <shop@example.com>" || d.Subject != "Your invoice" || d.To[0] != "Ann <ann@example.com>" ||
		d.RequestID != sent.header.Get("X-Request-Id") || d.DeliveredAt.IsZero() {
		t.Fatalf("delivery %+v", d)
	}
	var payload map[string]any
	if err := json.Unmarshal(d.Payload, &payload); err != nil || payload["text"] != "Invoice attached." {
		t.Fatalf("payload %s", d.Payload)
	}
	if tmpl := ledger.Data[1]; tmpl.Kind != fakeapi.KindTemplate || tmpl.TemplateID != "welcome" {
		t.Fatalf("template delivery %+v", tmpl)
	}

	for addr, want := range map[string]int{"ann@example.com": 1, "ANN@example.com": 1, "carl@example.com": 1, "nobody@example.com": 0} {
		r = do(t, url, http.MethodGet, "/_fake/deliveries?to="+addr, nil, http.Header{})
		if got := len(r.body["data"].([]any)); got != want {
			t.Errorf("deliveries to %s = %d, want %d", addr, got, want)
		}
	}

	r = do(t, url, http.MethodGet, "/_fake/requests", nil, http.Header{})
	var log struct{ Data []fakeapi.RequestRecord }
	if err := json.Unmarshal(r.raw, &log); err != nil {
		t.Fatal(err)
	}
	if len(log.Data) != 3 || log.Data[0].IdempotencyKey != "k-ann" || log.Data[0].KeyPrefix != "oe_test_…" ||
		log.Data[0].Status != 200 || log.Data[2].Method != http.MethodGet || log.Data[2].Path != "/emails" {
		t.Fatalf("request log %s", r.raw)
	}

	wantStatus(t, do(t, url, http.MethodPost, "/_fake/reset", nil, http.Header{}), http.StatusOK)
	r = do(t, url, http.MethodGet, "/_fake/deliveries", nil, http.Header{})
	if string(r.raw) != `{"data":[]}` {
		t.Fatalf("after reset %s", r.raw)
	}
	wantError(t, do(t, url, http.MethodGet, "/_fake/nothing", nil, http.Header{}), http.StatusNotFound, "not_found_error", "not_found")
	wantError(t, do(t, url, http.MethodPost, "/_fake/deliveries", nil, http.Header{}), http.StatusMethodNotAllowed,
		"invalid_request_error", "method_not_allowed")
}

func TestRequestLogNeverHoldsTheAPIKey(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	do(t, url, http.MethodGet, "/emails", nil, nil)
	b, _ := json.Marshal(srv.Requests())
	if strings.Contains(string(b), testKey) {
		t.Fatalf("the request log holds the API key: %s", b)
	}
}

func TestWaitDeliveries(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	done := make(chan error, 1)
	go func() { done <- srv.WaitDeliveries(waitCtx(t), 2) }()
	do(t, url, http.MethodPost, "/emails/batch", map[string]any{"emails": []any{email("a@example.com"), email("b@example.com")}}, nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := srv.WaitDeliveries(ctx, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitDeliveries past its deadline = %v", err)
	}

	go func() { done <- srv.WaitDeliveries(context.Background(), 3) }()
	srv.Close()
	if err := <-done; !errors.Is(err, fakeapi.ErrClosed) {
		t.Fatalf("WaitDeliveries on Close = %v", err)
	}
}
