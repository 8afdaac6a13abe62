package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/base/unsub"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/ops/unsubscribe"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

const testUnsubSecret = "unsub-secret-Xq7PzR4vK9mW2sT8"

// unsubHarness is a harness whose worker signs List-Unsubscribe headers
// for the endpoint it serves on a real HTTP server, logging into logs.
func unsubHarness(t *testing.T, logs *bytes.Buffer, p path) (*harness, *httptest.Server) {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarness(t, SendConfig{Logger: log, Unsubscribe: &Unsubscribe{URL: srv.URL, Secret: testUnsubSecret}}).on(p)
	signer, err := unsub.New(srv.URL, "", testUnsubSecret)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle(unsubscribe.Pattern, unsubscribe.New(h.ob, signer, log, nil))
	return h, srv
}

func topicEmail(to, subject string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"from":"news@example.com","to":[%q],"subject":%q,"text":"Hi.","headers":{"X-Campaign":"w49"}}`, to, subject))
}

func (h *harness) unsubscribes() int {
	h.t.Helper()
	var n int
	if err := h.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM sendonce_unsubscribe) + (SELECT count(*) FROM sendonce_unsubscribe_event)`).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

var listURL = regexp.MustCompile(`^<(https?://[^>]+)>$`)

// TestOneClickUnsubscribe: an intent with topic digest carries both
// headers at the API; a POST to its link unsubscribes (address, digest);
// the next digest intent to the address is suppressed with no API call,
// while an invoice to it is sent. A GET changes nothing, nor do a tampered
// token or another address's; the secret is in no output.
func TestOneClickUnsubscribe(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		var logs bytes.Buffer
		h, srv := unsubHarness(t, &logs, p)
		ctx := context.Background()

		h.enqueue(outbox.Intent{Key: "digest:w49:ada", Topic: "digest", Payload: topicEmail("Ada <ada@example.com>", "Digest 49")})
		h.expect(h.try("digest:w49:ada", 1), "completed", false, "run")
		ds := h.fake.Deliveries()
		if len(ds) != 1 {
			t.Fatalf("%d deliveries, want 1", len(ds))
		}
		var sent struct {
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(ds[0].Payload, &sent); err != nil {
			t.Fatal(err)
		}
		if sent.Headers["List-Unsubscribe-Post"] != "List-Unsubscribe=One-Click" || sent.Headers["X-Campaign"] != "w49" {
			t.Fatalf("headers at the API: %v", sent.Headers)
		}
		m := listURL.FindStringSubmatch(sent.Headers["List-Unsubscribe"])
		if m == nil || !strings.HasPrefix(m[1], srv.URL+"/u/") {
			t.Fatalf("List-Unsubscribe %q, want <%s/u/TOKEN>", sent.Headers["List-Unsubscribe"], srv.URL)
		}
		link := m[1]
		if rec := h.get("digest:w49:ada"); !bytes.Contains(rec.ListUnsubscribe, []byte(link)) {
			t.Fatalf("frozen headers %s, want the link sent", rec.ListUnsubscribe)
		}

		// GET: a page with a button, nothing unsubscribed.
		resp, err := http.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(page), `<form method="post">`) {
			t.Fatalf("GET: %d %s", resp.StatusCode, page)
		}
		if n := h.unsubscribes(); n != 0 {
			t.Fatalf("after GET: %d unsubscribe rows, want 0", n)
		}

		// Tampered and other-address tokens: 4xx, nothing changes.
		token := strings.TrimPrefix(link, srv.URL+"/u/")
		body, sig, _ := strings.Cut(token, ".")
		other := unsub.Must(srv.URL, testUnsubSecret+"-not").Token("ada@example.com", "digest")
		for name, bad := range map[string]string{
			"tampered signature": body + "." + strings.Repeat("A", len(sig)),
			"other address":      urlToken("bo@example.com", "digest") + "." + sig,
			"other topic":        urlToken("ada@example.com", "news") + "." + sig,
			"other secret":       other,
			"no signature":       body,
		} {
			resp, err := http.Post(srv.URL+"/u/"+bad, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode < 400 || resp.StatusCode > 499 {
				t.Errorf("%s: %d, want 4xx", name, resp.StatusCode)
			}
		}
		if n := h.unsubscribes(); n != 0 {
			t.Fatalf("after bad tokens: %d unsubscribe rows, want 0", n)
		}

		// One-click POST, twice: 200 both times, one unsubscribe, one event.
		for i := range 2 {
			resp, err := http.PostForm(link, url.Values{"List-Unsubscribe": {"One-Click"}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("POST %d: %d, want 200", i+1, resp.StatusCode)
			}
		}
		list, err := h.ob.Unsubscriptions(ctx, &outbox.UnsubscriptionParams{Topic: "digest"})
		if err != nil || len(list) != 1 || list[0].Address != "ada@example.com" || list[0].Source != "one-click" {
			t.Fatalf("unsubscriptions: %+v, %v", list, err)
		}
		var events int
		if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM sendonce_unsubscribe_event
		WHERE address = 'ada@example.com' AND topic = 'digest' AND action = 'unsubscribed' AND source = 'one-click'`).Scan(&events); err != nil || events != 1 {
			t.Fatalf("events: %d, %v; want 1", events, err)
		}

		// The next digest is suppressed without a call; an invoice is sent.
		before := len(h.fake.Requests())
		h.enqueue(outbox.Intent{Key: "digest:w50:ada", Topic: "digest", Payload: topicEmail("ada@example.com", "Digest 50")})
		h.expect(h.try("digest:w50:ada", 1), h.pick("completed", "cancelled"), false, "digest 50")
		rec := h.get("digest:w50:ada")
		if want := "not sent: every recipient is on the suppression list: ada@example.com (unsubscribed from topic digest)"; rec.State != outbox.StateSuppressed || rec.LastError != want {
			t.Fatalf("digest 50: %s %q, want suppressed %q", rec.State, rec.LastError, want)
		}
		if n := len(h.fake.Requests()) - before; n != 0 {
			t.Fatalf("%d API requests for the suppressed digest, want 0", n)
		}
		h.enqueue(outbox.Intent{Key: "invoice:ada", Payload: json.RawMessage(`{"from":"billing@example.com","to":["ada@example.com"],"subject":"Invoice","text":"Attached."}`)})
		h.expect(h.try("invoice:ada", 1), "completed", false, "invoice")
		if rec := h.get("invoice:ada"); rec.State != outbox.StateSent || len(h.fake.DeliveriesTo("ada@example.com")) != 2 {
			t.Fatalf("invoice: %s, %d deliveries to ada", rec.State, len(h.fake.DeliveriesTo("ada@example.com")))
		}

		if strings.Contains(logs.String(), testUnsubSecret) {
			t.Fatalf("the secret is in the logs:\n%s", logs.String())
		}
		for _, v := range []any{h.worker.signer, *h.worker.signer, h.worker.cfg.Unsubscribe, *h.worker.cfg.Unsubscribe} {
			if s := fmt.Sprintf("%v %+v %#v", v, v, v); strings.Contains(s, testUnsubSecret) {
				t.Fatalf("the secret is printed: %s", s)
			}
		}
	})
}

// urlToken is the unsigned half of a token for (address, topic).
func urlToken(address, topic string) string {
	tok := unsub.Must("https://x.test", testUnsubSecret).Token(address, topic)
	body, _, _ := strings.Cut(tok, ".")
	return body
}

// TestTopicRunCoalescedBatch: a run with topic digest gives its members
// the topic; frozen into a batch, each member's email carries its own
// List-Unsubscribe; an address unsubscribed after the freeze is taken out
// by the batch's first claim (suppressed, naming address and topic), and
// the others are sent in one call. The members' jobs of their own, which
// freeze them, are what a database upgraded from a release before the drain
// holds (outboxtest.GiveJobs).
func TestTopicRunCoalescedBatch(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h, srv := unsubHarness(t, &logs, ownJob)
	ctx := context.Background()
	intents := []outbox.Intent{
		{Key: "d:0", Payload: topicEmail("ada@example.com", "D")},
		{Key: "d:1", Payload: topicEmail("bo@example.com", "D")},
		{Key: "d:2", Payload: topicEmail("cy@example.com", "D")},
	}
	var keys []string
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		res, err := h.ob.EnqueueRun(ctx, tx, outbox.Run{Key: "digest:w49", Topic: "digest", Intents: intents})
		for _, r := range res.Intents {
			if r.Record.Topic != "digest" {
				t.Errorf("member %s topic %q, want the run's", r.Record.Key, r.Record.Topic)
			}
			keys = append(keys, r.Record.Key)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	outboxtest.GiveJobs(t, h.pool, keys...)
	var reqs []sendstate.ClaimRequest
	for _, k := range keys {
		reqs = append(reqs, sendstate.ClaimRequest{Key: k, JobID: *h.get(k).JobID})
	}
	b := &sendstate.Batcher{Pool: h.pool, River: h.river, Unsubscribe: h.worker.signer}
	batchKey, joined, err := b.Freeze(ctx, outbox.DefaultQueue, "digest:w49", reqs)
	if err != nil || len(joined) != 3 {
		t.Fatalf("freeze: %d joined, %v", len(joined), err)
	}
	if _, err := h.ob.Unsubscribe(ctx, "Bo <bo@example.com>", "digest", "test"); err != nil {
		t.Fatal(err)
	}
	bw := &batchWorker{w: h.worker, batcher: b}
	var jobID int64
	if err := h.pool.QueryRow(ctx, `SELECT job_id FROM sendonce_batch WHERE idempotency_key = $1`, batchKey).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	if res, err := workAs(h, jobID, 1, river.Worker[sendjob.BatchArgs](bw)); err != nil || !completed(res) {
		t.Fatalf("batch: %s", show(res, err))
	}
	if rec := h.get("d:1"); rec.State != outbox.StateSuppressed || !strings.Contains(rec.LastError, "bo@example.com (unsubscribed from topic digest)") {
		t.Fatalf("bo: %s %q", rec.State, rec.LastError)
	}
	ds := h.fake.Deliveries()
	if len(ds) != 2 {
		t.Fatalf("%d deliveries, want 2 (ada, cy)", len(ds))
	}
	signer := unsub.Must(srv.URL, testUnsubSecret)
	for _, d := range ds {
		var sent struct {
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(d.Payload, &sent); err != nil {
			t.Fatal(err)
		}
		if want := "<" + signer.URL(d.To[0], "digest") + ">"; sent.Headers["List-Unsubscribe"] != want ||
			sent.Headers["List-Unsubscribe-Post"] != unsub.OneClickValue {
			t.Errorf("to %s: headers %v, want List-Unsubscribe %s", d.To[0], sent.Headers, want)
		}
	}
}
