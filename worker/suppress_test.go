package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/addrforms"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

func (h *harness) suppress(addrs ...string) {
	h.t.Helper()
	if _, err := h.ob.Suppress(context.Background(), addrs, "test"); err != nil {
		h.t.Fatal(err)
	}
}

func TestSuppressedIntentIsNotSent(t *testing.T) {
	t.Parallel()
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}).on(p)
		h.suppress("Ada@Example.com")
		h.enqueue(outbox.Intent{Key: "invoice:sup", Payload: json.RawMessage(
			`{"from":"billing@example.com","to":["Ada Lovelace <ada@example.com>"],"subject":"Invoice","text":"Attached."}`)})
		// Its job completes without a request; the drain's claim parks it.
		h.expect(h.try("invoice:sup", 1), h.pick("completed", "cancelled"), false, "run")
		rec := h.get("invoice:sup")
		if rec.State != outbox.StateSuppressed || rec.Attempts != 0 || rec.FirstAttemptAt != nil || rec.Uncertain {
			t.Fatalf("record %+v, want suppressed with no attempt", rec)
		}
		if want := "not sent: every recipient is on the suppression list: ada@example.com (manual)"; rec.LastError != want {
			t.Fatalf("last error %q, want %q", rec.LastError, want)
		}
		if n := len(h.fake.Requests()); n != 0 {
			t.Fatalf("%d API requests, want none", n)
		}
		if got := fmt.Sprint(h.results()); got != "[suppressed]" {
			t.Fatalf("outcomes %s", got)
		}

		// Retry is refused while the address is on the list, and sends once it
		// is taken off: the next claim looks the list up again.
		if _, err := h.ob.Retry(context.Background(), "invoice:sup", nil); err == nil ||
			!strings.Contains(err.Error(), "every recipient is still on the suppression list (ada@example.com)") {
			t.Fatalf("retry while suppressed: %v", err)
		}
		if n, err := h.ob.Unsuppress(context.Background(), []string{"ada@example.com"}); err != nil || n != 1 {
			t.Fatalf("unsuppress: %d, %v", n, err)
		}
		if _, err := h.ob.Retry(context.Background(), "invoice:sup", nil); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if p.perJob {
			// Retry puts the intent back on the drain, with no job of its
			// own, whichever way it was sent before.
			if rec := h.get("invoice:sup"); rec.JobID != nil {
				t.Fatalf("after retry: the intent has job %d, want none (the drain sends it)", *rec.JobID)
			}
			h.perJob = false
		}
		h.expect(h.try("invoice:sup", 1), "completed", false, "run after retry")
		if rec := h.get("invoice:sup"); rec.State != outbox.StateSent || len(h.fake.Deliveries()) != 1 {
			t.Fatalf("after retry: %+v, %d deliveries", rec, len(h.fake.Deliveries()))
		}
	})
}

func TestPartlySuppressed(t *testing.T) {
	t.Parallel()
	body := json.RawMessage(`{"from":"billing@example.com","to":["ada@example.com","bo@example.com"],` +
		`"cc":"cy@example.com","subject":"Invoice","text":"Attached."}`)

	t.Run("send to the rest", func(t *testing.T) {
		t.Parallel()
		onPaths(t, func(t *testing.T, p path) {
			h := newHarness(t, SendConfig{}).on(p)
			h.suppress("bo@example.com", "cy@example.com")
			h.enqueue(outbox.Intent{Key: "invoice:part", Payload: body})
			h.expect(h.try("invoice:part", 1), "completed", false, "run")
			rec := h.get("invoice:part")
			d := h.fake.Deliveries()
			if rec.State != outbox.StateSent || len(d) != 1 || fmt.Sprint(d[0].To) != "[ada@example.com]" || len(d[0].Cc) != 0 {
				t.Fatalf("record %+v, deliveries %+v", rec, d)
			}
			if fmt.Sprint(rec.SuppressedRecipients) != "[bo@example.com cy@example.com]" {
				t.Fatalf("suppressed recipients %v", rec.SuppressedRecipients)
			}
			// Taking an address off the list later changes nothing for an
			// intent already claimed: its body under the key stays the same.
			if _, err := h.ob.Unsuppress(context.Background(), []string{"bo@example.com"}); err != nil {
				t.Fatal(err)
			}
			// As a crash lost the record: its job runs again with the intent
			// sending; a drained intent goes back to pending, uncertain
			// (RescueDrained).
			if _, err := h.pool.Exec(context.Background(), `UPDATE sendonce_outbox SET state = $1, uncertain = true
			WHERE idempotency_key = 'invoice:part'`, h.pick("sending", "pending")); err != nil {
				t.Fatal(err)
			}
			h.expect(h.try("invoice:part", 2), "completed", false, "rerun")
			reqs := h.fake.Requests()
			if len(reqs) != 2 || !h.get("invoice:part").Replayed || len(h.fake.Deliveries()) != 1 {
				t.Fatalf("rerun: %d requests, record %+v; want the first body replayed", len(reqs), h.get("invoice:part"))
			}
		})
	})

	t.Run("park", func(t *testing.T) {
		t.Parallel()
		onPaths(t, func(t *testing.T, p path) {
			h := newHarness(t, SendConfig{PartlySuppressed: PartlySuppressedPark}).on(p)
			h.suppress("bo@example.com")
			h.enqueue(outbox.Intent{Key: "invoice:park", Payload: body})
			h.expect(h.try("invoice:park", 1), h.pick("completed", "cancelled"), false, "run")
			rec := h.get("invoice:park")
			if rec.State != outbox.StateSuppressed || !strings.Contains(rec.LastError, "partly suppressed intents are parked: bo@example.com (manual)") {
				t.Fatalf("record %+v", rec)
			}
			if n := len(h.fake.Requests()); n != 0 {
				t.Fatalf("%d API requests, want none", n)
			}
		})
	})
}

// TestSuppressedMemberSentAlone: an email intent with a suppressed
// recipient never joins a coalesced batch (a batch's body is frozen before
// its first attempt); its own job parks it, and the others go as a batch.
// Intents with jobs of their own, frozen by their jobs, are what a database
// upgraded from a release before the drain holds (outboxtest.GiveJobs).
func TestSuppressedMemberSentAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, SendConfig{}).on(ownJob)
	h.suppress("bo@example.com")
	var reqs []sendstate.ClaimRequest
	for i, addr := range []string{"ada@example.com", "bo@example.com", "cy@example.com"} {
		key := fmt.Sprintf("digest:%d", i)
		rec := h.enqueue(outbox.Intent{Key: key, Payload: emailBody(addr)})
		reqs = append(reqs, sendstate.ClaimRequest{Key: key, JobID: *rec.JobID})
	}
	b := &sendstate.Batcher{Pool: h.pool, River: h.river}
	batchKey, joined, err := b.Freeze(context.Background(), outbox.DefaultQueue, "", reqs)
	if err != nil || fmt.Sprint(joined) != fmt.Sprint([]int64{reqs[0].JobID, reqs[2].JobID}) {
		t.Fatalf("freeze: joined %v, %v; want the jobs of digest:0 and digest:2", joined, err)
	}
	if res, err := h.workBatch(batchKey, 1); err != nil || !completed(res) {
		t.Fatalf("batch: %s", show(res, err))
	}
	if res, err := h.work("digest:1", 1); err != nil || !completed(res) {
		t.Fatalf("digest:1: %s", show(res, err))
	}
	if got := fmt.Sprintln(h.get("digest:0").State, h.get("digest:1").State, h.get("digest:2").State); got != "sent suppressed sent\n" {
		t.Fatalf("states %s", got)
	}
	if d := h.fake.DeliveriesTo("bo@example.com"); len(d) != 0 {
		t.Fatalf("deliveries to the suppressed address: %+v", d)
	}
}

// TestSuppressedAddressForms is issue 22's reproduction: with
// ada@example.com suppressed, an intent to any form of the table that the
// API's parser reads as ada@example.com is either refused at enqueue or
// parked as suppressed; none reaches the API.
func TestSuppressedAddressForms(t *testing.T) {
	t.Parallel()
	forms := addrforms.Load(t)
	onPaths(t, func(t *testing.T, p path) {
		h := newHarness(t, SendConfig{}).on(p)
		h.suppress("ada@example.com")
		isAda := func(a string) bool {
			p, err := mail.ParseAddress(a)
			return err == nil && strings.EqualFold(p.Address, "ada@example.com")
		}
		tried := 0
		for i, f := range forms {
			if !isAda(f.Form) {
				continue
			}
			tried++
			key := fmt.Sprintf("form:%d", i)
			payload, _ := json.Marshal(map[string]any{"from": "billing@example.com", "to": []string{f.Form}, "subject": "Invoice", "text": "Attached."})
			err := pgx.BeginFunc(context.Background(), h.pool, func(tx pgx.Tx) error {
				_, err := h.ob.Enqueue(context.Background(), tx, outbox.Intent{Key: key, Payload: json.RawMessage(payload)})
				return err
			})
			if err == nil && p.perJob {
				outboxtest.GiveJobs(t, h.pool, key)
			}
			if err != nil {
				if f.Normal != "" || !errors.Is(err, outbox.ErrInvalid) {
					t.Errorf("enqueue to %q: %v", f.Form, err)
				}
				continue
			}
			if f.Normal == "" {
				t.Errorf("enqueue to %q: accepted, want it refused", f.Form)
			}
			h.expect(h.try(key, 1), h.pick("completed", "cancelled"), false, fmt.Sprintf("%q: run", f.Form))
			if rec := h.get(key); rec.State != outbox.StateSuppressed {
				t.Errorf("intent to %q: %s, want suppressed", f.Form, rec.State)
			}
		}
		if tried < 10 {
			t.Fatalf("only %d forms of ada@example.com in the table", tried)
		}
		for _, d := range h.fake.Deliveries() {
			for _, a := range append(append(d.To, d.Cc...), d.Bcc...) {
				if isAda(a) {
					t.Errorf("sent to the suppressed address as %q", a)
				}
			}
		}
		if n := len(h.fake.Requests()); n != 0 {
			t.Errorf("%d API requests, want none", n)
		}
	})
}
