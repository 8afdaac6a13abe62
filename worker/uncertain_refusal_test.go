package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertest"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/outbox"
)

// uncertainThenRefused makes the harness's next call meet this: its first
// request is delivered and the answer lost (a 503 after delivery); while
// the client waits to retry, the fake starts refusing every request whole
// before it looks at the key (a proxy's 400, a 422 after a validation
// change), so the retry, within the same call, is refused. The client's
// wait between the two is where the rules change: no clock involved.
func (h *harness) uncertainThenRefused(status int) {
	h.t.Helper()
	if err := h.fake.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultErrorAfter, Status: 503}); err != nil {
		h.t.Fatal(err)
	}
	c, err := client.New(client.WithAPIKey(testKey), client.WithBaseURL(h.fake.URL()),
		client.WithSleep(func(ctx context.Context, d time.Duration) error {
			if err := h.fake.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultErrorBefore, Status: status}); err != nil {
				return err
			}
			return ctx.Err()
		}))
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := h.worker.cfg
	h.client, h.worker = c, newSendWorker(h.pool, c, &cfg)
}

// TestRefusalAfterUncertainTryInTheSameCall: the whole-system test found
// (seed 130) an intent parked failed and *certain* although its email was
// delivered: the client's first request was delivered and its answer lost,
// the client retried at once and the retry was refused with a 422. The
// row must say uncertain (a certain failure may be retried without
// --force, past the window, under a key the API has forgotten), and a
// batch so refused must not be split (its members would go out again
// under new keys: hole 2 of issue 22, reached within one call).
func TestRefusalAfterUncertainTryInTheSameCall(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 422} {
		t.Run(fmt.Sprintf("single/%d", status), func(t *testing.T) {
			t.Parallel()
			onPaths(t, func(t *testing.T, p path) {
				h := newHarness(t, SendConfig{}).on(p)
				h.uncertainThenRefused(status)
				h.enqueue(outbox.Intent{Key: "invoice:1", Payload: emailBody("ada@example.com")})
				h.expect(h.try("invoice:1", 1), "cancelled", false, "attempt 1 (parked)")
				if n := len(h.fake.DeliveriesTo("ada@example.com")); n != 1 {
					t.Fatalf("%d deliveries, want 1 (the first request)", n)
				}
				rec := h.get("invoice:1")
				if rec.State != outbox.StateFailed || !rec.Uncertain || !strings.Contains(rec.LastError, "may have been delivered") {
					t.Errorf("state %s, uncertain %v, last error %q; want failed, uncertain, saying it may have been delivered",
						rec.State, rec.Uncertain, rec.LastError)
				}
			})
		})
		// A batch of members with jobs of their own, frozen by them, as in
		// a database upgraded from a release before the drain.
		t.Run(fmt.Sprintf("batch/%d", status), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, SendConfig{}).on(ownJob)
			to := []string{"ada@example.com", "bo@example.com", "cy@example.com"}
			batchKey, members := h.freeze("invoice", to...)
			h.uncertainThenRefused(status)
			res, err := h.workBatch(batchKey, 1)
			h.fake.SetFaults() //nolint:errcheck // no rules: always accepted
			h.sendLeft(members, 5)
			h.checkParkedUnsplit(batchKey, to, members, res, err)
		})
	}
}

// checkParkedUnsplit checks a batch refused whole after an uncertain
// attempt, once every job left has run: each recipient delivered once (by
// the first attempt), the attempt parked, the batch failed and never
// split, and each member failed, uncertain and still in it.
func (h *harness) checkParkedUnsplit(batchKey string, to, members []string, res *rivertest.WorkResult, err error) {
	h.t.Helper()
	for _, addr := range to {
		if n := len(h.fake.DeliveriesTo(addr)); n != 1 {
			h.t.Errorf("%s delivered %d times, want 1", addr, n)
		}
	}
	if err != nil || !cancelled(res) {
		h.t.Errorf("the refused attempt: %s, want parked (cancelled)", show(res, err))
	}
	if st := h.batchState(batchKey); st != "failed" {
		h.t.Errorf("batch %s, want failed (never split)", st)
	}
	for _, k := range members {
		if rec := h.get(k); rec.State != outbox.StateFailed || !rec.Uncertain || rec.BatchKey != batchKey {
			h.t.Errorf("%s: state %s, uncertain %v, batch %q; want failed, uncertain, in %s", k, rec.State, rec.Uncertain, rec.BatchKey, batchKey)
		}
	}
}
