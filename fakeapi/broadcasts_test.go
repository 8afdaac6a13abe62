package fakeapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

func TestBroadcasts(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	body := map[string]any{"from": "news@example.com", "audienceId": "aud_1", "audienceIds": []string{"aud_2"}, "subject": "News", "text": "hi"}
	h := headers("Idempotency-Key", "newsletter:2030-01")
	r := do(t, url, http.MethodPost, "/broadcasts", body, h)
	wantStatus(t, r, http.StatusOK)
	id := r.body["id"].(string)
	if r.body["audienceIds"] == nil || r.body["status"] != "sent" || r.body["replayed"] != false {
		t.Fatalf("broadcast answered %s", r.raw)
	}
	if r := do(t, url, http.MethodPost, "/broadcasts", body, h); r.body["replayed"] != true || r.body["id"] != id {
		t.Fatalf("broadcast replay %s", r.raw)
	}
	if r := do(t, url, http.MethodGet, "/broadcasts/"+id, nil, nil); r.body["id"] != id {
		t.Fatalf("GET broadcast %s", r.raw)
	}
	wantError(t, do(t, url, http.MethodGet, "/emails/"+id, nil, nil), http.StatusNotFound, "not_found_error", "not_found")
	if r := do(t, url, http.MethodGet, "/broadcasts?audienceId=aud_2", nil, nil); len(r.body["data"].([]any)) != 1 {
		t.Fatalf("list by audience %s", r.raw)
	}
	if r := do(t, url, http.MethodGet, "/broadcasts?audienceId=aud_9", nil, nil); len(r.body["data"].([]any)) != 0 {
		t.Fatalf("list by other audience %s", r.raw)
	}
	ds := srv.Deliveries()
	if len(ds) != 1 || ds[0].Kind != fakeapi.KindBroadcast || ds[0].MessageID != id || fmt.Sprint(ds[0].To) != "[aud_1 aud_2]" {
		t.Fatalf("deliveries %+v", ds)
	}
}
