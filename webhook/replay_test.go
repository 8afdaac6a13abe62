package webhook_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReplayUnderAnotherDeliveryID: a captured signed event posted again
// with another delivery header, or none, is the event already stored: it is
// answered as a duplicate and applied no second time.
func TestReplayUnderAnotherDeliveryID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	t0 := time.Now().Add(-time.Minute)
	removal := listEvent("evt_rm", "suppression.removed", "bo@example.com", t0)
	e.post(removal, "whd_1")
	e.post(listEvent("evt_b", "email.bounced", "bo@example.com", t0.Add(10*time.Second)), "whd_2")
	if !e.onList("bo@example.com") {
		t.Fatal("the bounce did not suppress bo")
	}
	// The attacker re-posts the removal (signed, fresh timestamp) under a
	// delivery id of its own, then with no delivery header.
	for _, delivery := range []string{"whd_forged", ""} {
		before := e.out.Len()
		if got := e.post(removal, delivery); got != http.StatusOK {
			t.Fatalf("replay under %q: status %d, want 200", delivery, got)
		}
		if answer := e.out.String()[before:]; !strings.Contains(answer, `"duplicate":true`) {
			t.Errorf("replay under %q answered %s, want a duplicate", delivery, strings.TrimSpace(answer))
		}
	}
	if n := e.events(); n != 2 {
		t.Errorf("%d events stored, want 2 (a replay is the same event)", n)
	}
	if !e.onList("bo@example.com") {
		t.Error("a replayed removal took bo off the list")
	}
	// The delivery header is still kept, for the API's delivery log: the
	// first one the event came with.
	var delivery string
	if err := e.pool.QueryRow(t.Context(), `SELECT delivery_id FROM sendonce_event WHERE event_id = 'evt_rm'`).Scan(&delivery); err != nil {
		t.Fatal(err)
	}
	if delivery != "whd_1" {
		t.Errorf("delivery_id %q, want whd_1", delivery)
	}
}
