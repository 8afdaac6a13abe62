package fakeapi_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

// item is data[i] of a batch answer.
func item(r result, i int) map[string]any {
	data, _ := r.body["data"].([]any)
	if i >= len(data) {
		return nil
	}
	m, _ := data[i].(map[string]any)
	return m
}

// wantRefused checks a refused batch item: status failed, no id, the error
// with its code and param, and the email's to echoed.
func wantRefused(t *testing.T, r result, i int, code, param, to string) {
	t.Helper()
	it := item(r, i)
	e, _ := it["error"].(map[string]any)
	if it["status"] != "failed" || it["id"] != nil || e == nil ||
		e["type"] != "invalid_request_error" || e["code"] != code || e["param"] != param || e["message"] == "" ||
		!reflect.DeepEqual(it["to"], []any{to}) {
		t.Errorf("data[%d] = %v, want refused with %s at %s; answer %s", i, it, code, param, r.raw)
	}
}

func TestRejectRefusesSomeEmailsOfABatch(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	body := map[string]any{"emails": []any{
		email("a@example.com"),
		email("bounced@example.com"),
		email("c@example.com"),
		with(email("d@example.com"), "cc", []string{"Bounced <BOUNCED@example.com>"}),
		email("e@example.com"),
	}}
	h := headers("Idempotency-Key", "batch:5", "X-Fake-Fault", "reject=suppressed;to=bounced@")
	first := do(t, url, http.MethodPost, "/emails/batch", body, h)
	wantStatus(t, first, http.StatusOK)
	if first.body["sent"] != 3.0 || first.body["failed"] != 2.0 || first.body["replayed"] != false {
		t.Fatalf("batch answer %s", first.raw)
	}
	if data := first.body["data"].([]any); len(data) != 5 {
		t.Fatalf("data has %d items, want one per requested email: %s", len(data), first.raw)
	}
	for i, to := range map[int]string{0: "a@example.com", 2: "c@example.com", 4: "e@example.com"} {
		if it := item(first, i); it["status"] != "sent" || it["id"] == nil || it["error"] != nil ||
			!reflect.DeepEqual(it["to"], []any{to}) {
			t.Errorf("data[%d] = %v, want the email to %s, sent", i, it, to)
		}
	}
	wantRefused(t, first, 1, "suppressed", "emails[1].to", "bounced@example.com")
	wantRefused(t, first, 3, "suppressed", "emails[3].cc", "d@example.com")

	// The ledger holds the three emails sent, one delivery each, in order.
	wantLedger := func(when string) {
		t.Helper()
		ds := srv.Deliveries()
		var got []string
		for _, d := range ds {
			got = append(got, d.To[0])
			if d.Kind != fakeapi.KindBatch || d.IdempotencyKey != "batch:5" {
				t.Errorf("%s: delivery %+v", when, d)
			}
		}
		if want := []string{"a@example.com", "c@example.com", "e@example.com"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: deliveries to %v, want %v", when, got, want)
		}
	}
	wantLedger("after the batch")

	// A retry replays the same answer item for item, refusals included, and
	// sends nothing: the reject rule does not run again.
	second := do(t, url, http.MethodPost, "/emails/batch", body, h)
	wantStatus(t, second, http.StatusOK)
	if second.body["replayed"] != true || second.body["sent"] != 3.0 || second.body["failed"] != 2.0 ||
		!reflect.DeepEqual(second.body["data"], first.body["data"]) {
		t.Fatalf("replay %s, first %s", second.raw, first.raw)
	}
	wantLedger("after the replay")

	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Fault != "reject=suppressed;to=bounced@" || reqs[0].Rejected != 2 ||
		!reqs[1].Replayed || reqs[1].Rejected != 0 || reqs[1].Fault != "" {
		t.Fatalf("request log %+v", reqs)
	}
	if r := do(t, url, http.MethodGet, "/emails", nil, nil); len(r.body["data"].([]any)) != 3 {
		t.Fatalf("GET /emails lists refused emails: %s", r.raw)
	}
}

func TestRejectEveryEmailOfABatch(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	body := map[string]any{"emails": []any{email("a@example.com"), email("b@example.com")}}
	r := do(t, url, http.MethodPost, "/emails/batch", body, headers("X-Fake-Fault", "reject"))
	wantStatus(t, r, http.StatusOK)
	if r.body["sent"] != 0.0 || r.body["failed"] != 2.0 {
		t.Fatalf("answer %s", r.raw)
	}
	wantRefused(t, r, 0, fakeapi.DefaultRejectCode, "emails[0].to", "a@example.com")
	wantRefused(t, r, 1, fakeapi.DefaultRejectCode, "emails[1].to", "b@example.com")
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("deliveries = %d, want 0", n)
	}
}

// Each refused email is one firing: times=2 refuses the first two emails.
func TestRejectTimesCountsEmails(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	body := map[string]any{"emails": []any{email("a@example.com"), email("b@example.com"), email("c@example.com")}}
	h := headers("Idempotency-Key", "k", "X-Fake-Fault", "reject;times=2")
	r := do(t, url, http.MethodPost, "/emails/batch", body, h)
	wantStatus(t, r, http.StatusOK)
	wantRefused(t, r, 0, fakeapi.DefaultRejectCode, "emails[0].to", "a@example.com")
	wantRefused(t, r, 1, fakeapi.DefaultRejectCode, "emails[1].to", "b@example.com")
	if item(r, 2)["status"] != "sent" || r.body["sent"] != 1.0 || len(srv.Deliveries()) != 1 {
		t.Fatalf("answer %s", r.raw)
	}
}

func TestRejectSingleSend(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	h := headers("Idempotency-Key", "invoice:7", "X-Fake-Fault", "reject;times=1")
	r := do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
	wantError(t, r, http.StatusUnprocessableEntity, "invalid_request_error", "recipient_rejected", "to")
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("a refused send delivered %d", n)
	}
	// Nothing was stored under the key: the retry is a fresh send (the rule
	// fired its one time).
	r = do(t, url, http.MethodPost, "/emails", email("ann@example.com"), h)
	wantStatus(t, r, http.StatusOK)
	if r.body["replayed"] != false || len(srv.Deliveries()) != 1 {
		t.Fatalf("retry %s", r.raw)
	}
	if rec := srv.Requests()[0]; rec.Status != 422 || rec.Rejected != 1 || rec.Fault != "reject=recipient_rejected;times=1" {
		t.Fatalf("request log %+v", rec)
	}

	// Configured rules refuse template sends too, with their code; broadcasts
	// are never refused.
	if err := srv.SetFaults(fakeapi.Fault{Kind: fakeapi.FaultReject, Code: "suppressed", To: "bob@"}); err != nil {
		t.Fatal(err)
	}
	tmpl := map[string]any{"from": "shop@example.com", "to": []string{"ann@example.com"}, "bcc": []string{"bob@example.com"}}
	r = do(t, url, http.MethodPost, "/templates/welcome/send", tmpl, nil)
	wantError(t, r, http.StatusUnprocessableEntity, "invalid_request_error", "suppressed", "bcc")
	broadcast := map[string]any{"from": "news@example.com", "audienceId": "bob@", "subject": "News", "html": "<p>hi</p>"}
	wantStatus(t, do(t, url, http.MethodPost, "/broadcasts", broadcast, nil), http.StatusOK)
	if n := len(srv.Deliveries()); n != 2 {
		t.Fatalf("deliveries = %d, want 2", n)
	}
}

// A malformed email still refuses the whole batch before any reject rule
// runs: 422 validation_error, nothing sent, the key free.
func TestRejectLeavesValidationWhole(t *testing.T) {
	t.Parallel()
	srv, url := startTest(t, fakeapi.Config{})
	bad := map[string]any{"emails": []any{email("a@example.com"), with(email("b@example.com"), "to", "b@example.com"), email("c@example.com")}}
	h := headers("Idempotency-Key", "v1", "X-Fake-Fault", "reject;to=a@")
	r := do(t, url, http.MethodPost, "/emails/batch", bad, h)
	wantError(t, r, http.StatusUnprocessableEntity, "validation_error", "invalid_field", "emails[1].to")
	if n := len(srv.Deliveries()); n != 0 {
		t.Fatalf("a refused batch delivered %d", n)
	}
	if rec := srv.Requests()[0]; rec.Fault != "" || rec.Rejected != 0 {
		t.Fatalf("a reject rule ran on an invalid batch: %+v", rec)
	}
	// The key is free: the corrected batch under it is sent, less the
	// email the rule refuses.
	good := map[string]any{"emails": []any{email("a@example.com"), email("b@example.com"), email("c@example.com")}}
	r = do(t, url, http.MethodPost, "/emails/batch", good, h)
	wantStatus(t, r, http.StatusOK)
	if r.body["replayed"] != false || r.body["sent"] != 2.0 || r.body["failed"] != 1.0 || len(srv.Deliveries()) != 2 {
		t.Fatalf("corrected batch %s", r.raw)
	}
}
