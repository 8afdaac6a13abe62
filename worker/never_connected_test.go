package worker

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/outbox"
)

// neverConnects points the harness's client at a port nothing listens on:
// every request is refused before any byte of it leaves.
func (h *harness) neverConnects() {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := client.New(client.WithAPIKey(testKey), client.WithBaseURL("http://"+addr),
		client.WithSleep(func(ctx context.Context, d time.Duration) error { return ctx.Err() }))
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := h.worker.cfg
	h.client, h.worker = c, newSendWorker(h.pool, c, &cfg)
}

// TestNeverConnectedIsCertain: with the API down (connection refused), an
// intent's attempts are recorded as certainly not sent, so the operator
// can cancel the retrying intent; once an attempt may have reached the API
// (a 503 after the request was taken) it is uncertain and the cancel is
// refused.
func TestNeverConnectedIsCertain(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}).on(p)
		h.neverConnects()
		h.enqueue(outbox.Intent{Key: "invoice:down", Payload: emailBody("ada@example.com")})
		for attempt := 1; attempt <= 3; attempt++ {
			h.expect(h.try("invoice:down", attempt), "retried", true, "an attempt with the API down")
		}
		rec := h.get("invoice:down")
		if rec.State != outbox.StatePending || rec.Attempts != 3 || rec.Uncertain || !strings.Contains(rec.LastError, "connection refused") {
			t.Fatalf("after 3 refused attempts: %s, %d attempts, uncertain %v, last error %q; want pending, 3, not uncertain, connection refused",
				rec.State, rec.Attempts, rec.Uncertain, rec.LastError)
		}
		if rec, err := h.ob.Cancel(context.Background(), "invoice:down"); err != nil || rec.State != outbox.StateCanceled {
			t.Fatalf("Cancel = %+v, %v; want canceled", rec, err)
		}
		if n := len(h.fake.Deliveries()); n != 0 {
			t.Fatalf("%d deliveries, want none", n)
		}
	})
}

// TestMaybeDeliveredIsNotCancelable is the other side: a 503 after the API
// took the request leaves the intent uncertain, and Cancel refuses it.
func TestMaybeDeliveredIsNotCancelable(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}, fakeapi.Fault{Kind: fakeapi.FaultErrorAfter, Status: 503}).on(p)
		h.enqueue(outbox.Intent{Key: "invoice:maybe", Payload: emailBody("ada@example.com")})
		h.expect(h.try("invoice:maybe", 1), "retried", true, "an attempt answered 503 after delivery")
		if rec := h.get("invoice:maybe"); rec.State != outbox.StatePending || !rec.Uncertain {
			t.Fatalf("after a 503: %s, uncertain %v; want pending, uncertain", rec.State, rec.Uncertain)
		}
		_, err := h.ob.Cancel(context.Background(), "invoice:maybe")
		var se *outbox.StateError
		if !errors.As(err, &se) || !strings.Contains(se.Reason, "may have reached the API") {
			t.Fatalf("Cancel = %v, want refused: an attempt may have reached the API", err)
		}
	})
}
