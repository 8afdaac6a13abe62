package fakeapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

// scheduled is an email body due d after the clock's now.
func scheduled(clk *clock, d time.Duration) map[string]any {
	return with(email("ann@example.com"), "scheduledAt", clk.Now().Add(d).Format("2006-01-02T15:04:05.000Z"))
}

func TestScheduledSendIsHeldUntilDue(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv, url := startTest(t, fakeapi.Config{Now: clk.Now})
	h := headers("Idempotency-Key", "later")
	body := scheduled(clk, time.Hour)
	r := do(t, url, http.MethodPost, "/emails", body, h)
	wantStatus(t, r, http.StatusOK)
	id := r.body["id"].(string)
	if r.body["status"] != "scheduled" || r.body["scheduledAt"] != "2030-01-02T11:00:00.000Z" || r.body["sentAt"] != nil {
		t.Fatalf("scheduled answer %s", r.raw)
	}
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("a scheduled send was delivered at once (%d)", n)
	}
	list := do(t, url, http.MethodGet, "/emails?status=scheduled", nil, nil)
	if data := list.body["data"].([]any); len(data) != 1 {
		t.Fatalf("status=scheduled lists %s", list.raw)
	}

	clk.Add(time.Hour)
	r = do(t, url, http.MethodGet, "/emails/"+id, nil, nil)
	if r.body["status"] != "sent" || r.body["sentAt"] != "2030-01-02T11:00:00.000Z" {
		t.Fatalf("due email %s", r.raw)
	}
	ds := srv.Deliveries()
	if len(ds) != 1 || ds[0].MessageID != id || !ds[0].DeliveredAt.Equal(clk.Now()) {
		t.Fatalf("deliveries %+v", ds)
	}
	// A replay shows the message as it is now.
	r = do(t, url, http.MethodPost, "/emails", body, h)
	if r.body["replayed"] != true || r.body["status"] != "sent" || r.body["id"] != id {
		t.Fatalf("replay %s", r.raw)
	}
}

func TestSchedulerDeliversWithoutReads(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv, url := startTest(t, fakeapi.Config{Now: clk.Now, SchedulerInterval: 5 * time.Millisecond})
	wantStatus(t, do(t, url, http.MethodPost, "/emails", scheduled(clk, time.Minute), nil), http.StatusOK)
	clk.Add(time.Minute)
	if err := srv.WaitDeliveries(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
}

func TestCancelScheduled(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv, url := startTest(t, fakeapi.Config{Now: clk.Now})
	id := do(t, url, http.MethodPost, "/emails", scheduled(clk, time.Hour), nil).body["id"].(string)

	r := do(t, url, http.MethodPost, "/emails/"+id+"/cancel", nil, nil)
	wantStatus(t, r, http.StatusOK)
	if r.body["status"] != "cancelled" || r.body["cancelledAt"] != "2030-01-02T10:00:00.000Z" {
		t.Fatalf("cancel answered %s", r.raw)
	}
	// Cancel is retried by clients: a second cancel succeeds unchanged.
	r = do(t, url, http.MethodPost, "/emails/"+id+"/cancel", nil, nil)
	if r.status != http.StatusOK || r.body["status"] != "cancelled" {
		t.Fatalf("second cancel %s", r.raw)
	}
	clk.Add(2 * time.Hour)
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("a cancelled email was delivered (%d)", n)
	}
	r = do(t, url, http.MethodPatch, "/emails/"+id, map[string]any{"scheduledAt": "2031-01-01T00:00:00Z"}, nil)
	wantError(t, r, http.StatusConflict, "conflict_error", "email_cancelled")
	wantError(t, do(t, url, http.MethodPost, "/emails/em_nope/cancel", nil, nil), http.StatusNotFound, "not_found_error", "not_found")
}

func TestCancelSentIsAConflict(t *testing.T) {
	t.Parallel()
	_, url := startTest(t, fakeapi.Config{})
	id := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), nil).body["id"].(string)
	r := do(t, url, http.MethodPost, "/emails/"+id+"/cancel", nil, nil)
	wantError(t, r, http.StatusConflict, "conflict_error", "email_already_sent")
	r = do(t, url, http.MethodPatch, "/emails/"+id, map[string]any{"scheduledAt": "2031-01-01T00:00:00Z"}, nil)
	wantError(t, r, http.StatusConflict, "conflict_error", "email_already_sent")
}

func TestReschedule(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv, url := startTest(t, fakeapi.Config{Now: clk.Now})
	id := do(t, url, http.MethodPost, "/emails", scheduled(clk, time.Hour), nil).body["id"].(string)

	later := clk.Now().Add(3 * time.Hour).Format(time.RFC3339)
	r := do(t, url, http.MethodPatch, "/emails/"+id, map[string]any{"scheduledAt": later}, nil)
	wantStatus(t, r, http.StatusOK)
	if r.body["status"] != "scheduled" || r.body["scheduledAt"] != "2030-01-02T13:00:00.000Z" {
		t.Fatalf("reschedule answered %s", r.raw)
	}
	clk.Add(2 * time.Hour)
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("delivered at the old time (%d)", n)
	}
	clk.Add(time.Hour)
	if n := len(srv.Deliveries()); n != 1 {
		t.Fatalf("not delivered at the new time (%d)", n)
	}

	id = do(t, url, http.MethodPost, "/emails", scheduled(clk, time.Hour), nil).body["id"].(string)
	r = do(t, url, http.MethodPatch, "/emails/"+id, map[string]any{"subject": "new"}, nil)
	wantError(t, r, http.StatusUnprocessableEntity, "validation_error", "unsupported_field", "subject")
	r = do(t, url, http.MethodPatch, "/emails/"+id, map[string]any{"scheduledAt": "soon"}, nil)
	wantError(t, r, http.StatusUnprocessableEntity, "validation_error", "invalid_field", "scheduledAt")
	r = do(t, url, http.MethodPatch, "/emails/"+id, map[string]any{"scheduledAt": clk.Now().Add(-time.Minute).Format(time.RFC3339)}, nil)
	if r.body["status"] != "sent" || len(srv.Deliveries()) != 2 {
		t.Fatalf("rescheduling into the past: %s", r.raw)
	}
}

func TestScheduledBroadcast(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv, url := startTest(t, fakeapi.Config{Now: clk.Now})
	body := map[string]any{"from": "news@example.com", "audienceIds": []string{"aud_1"}, "subject": "News", "html": "<p>hi</p>",
		"scheduledAt": clk.Now().Add(time.Hour).Format(time.RFC3339)}
	r := do(t, url, http.MethodPost, "/broadcasts", body, nil)
	id := r.body["id"].(string)
	if r.body["status"] != "scheduled" {
		t.Fatalf("broadcast %s", r.raw)
	}
	r = do(t, url, http.MethodPost, "/broadcasts/"+id+"/cancel", nil, nil)
	if r.body["status"] != "cancelled" {
		t.Fatalf("cancel %s", r.raw)
	}
	clk.Add(2 * time.Hour)
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("cancelled broadcast delivered (%d)", n)
	}
	delete(body, "scheduledAt")
	id = do(t, url, http.MethodPost, "/broadcasts", body, nil).body["id"].(string)
	r = do(t, url, http.MethodPost, "/broadcasts/"+id+"/cancel", nil, nil)
	wantError(t, r, http.StatusConflict, "conflict_error", "broadcast_already_sent")
}
