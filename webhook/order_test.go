package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/webhook"
)

// listEvent is a suppression-changing event about address, created at.
func listEvent(id, typ, address string, at time.Time) string {
	return fmt.Sprintf(`{"id":%q,"type":%q,"createdAt":%q,"data":{"emailId":"em_%s","to":[%q],"email":%q}}`,
		id, typ, at.UTC().Format(time.RFC3339Nano), id, address, address)
}

// onList reports whether address is on the suppression list.
func (e *env) onList(address string) bool {
	e.t.Helper()
	return outboxtest.Value[bool](e.t, e.pool, `SELECT EXISTS (SELECT 1 FROM sendonce_suppression WHERE address = $1)`, address)
}

// TestSuppressionByEventTime: an address's events change the list in the
// order of their own createdAt, not of their arrival; at the same instant
// an add wins over a removal.
func TestSuppressionByEventTime(t *testing.T) {
	t.Parallel()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type arrival struct {
		typ string
		at  int // seconds after t0
	}
	cases := []struct {
		name     string
		arrivals []arrival
		want     bool // on the list at the end
	}{
		{"a bounce, then an older removal", []arrival{{"email.bounced", 10}, {"suppression.removed", 0}}, true},
		{"a removal, then an older bounce", []arrival{{"suppression.removed", 10}, {"email.bounced", 0}}, false},
		{"a removal, then an older complaint", []arrival{{"suppression.removed", 10}, {"email.complained", 0}}, false},
		{"in order: bounce, removal", []arrival{{"email.bounced", 0}, {"suppression.removed", 10}}, false},
		{"in order: removal, bounce", []arrival{{"suppression.removed", 0}, {"email.bounced", 10}}, true},
		{"bounce, complaint, then a removal between them", []arrival{{"email.bounced", 10}, {"email.complained", 20}, {"suppression.removed", 15}}, true},
		{"removal, api add, then an older removal", []arrival{{"suppression.removed", 0}, {"suppression.added", 20}, {"suppression.removed", 10}}, true},
		{"the same instant: bounce first", []arrival{{"email.bounced", 5}, {"suppression.removed", 5}}, true},
		{"the same instant: removal first", []arrival{{"suppression.removed", 5}, {"email.bounced", 5}}, true},
	}
	e := newEnv(t)
	for i, c := range cases {
		addr := fmt.Sprintf("o%d@example.com", i)
		for j, a := range c.arrivals {
			if got := e.post(listEvent(fmt.Sprintf("o%d_%d", i, j), a.typ, addr, at(a.at)), ""); got != 200 {
				t.Fatalf("%s: status %d", c.name, got)
			}
		}
		if got := e.onList(addr); got != c.want {
			t.Errorf("%s: on the list %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSuppressionManualIsNow: Suppress and Unsuppress are changes made now,
// later than any event created before them.
func TestSuppressionManualIsNow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	past := time.Now().Add(-time.Minute)

	// Added by hand, then a removal the API made a minute ago arrives.
	if _, err := e.ob.Suppress(ctx, []string{"kept@example.com"}, "ops"); err != nil {
		t.Fatal(err)
	}
	e.post(listEvent("m1", "suppression.removed", "kept@example.com", past), "")
	if !e.onList("kept@example.com") {
		t.Error("a removal created before Suppress took the address off the list")
	}

	// Bounced, removed by hand, then an older bounce arrives late.
	e.post(listEvent("m2", "email.bounced", "gone@example.com", past), "")
	if _, err := e.ob.Unsuppress(ctx, []string{"gone@example.com"}); err != nil {
		t.Fatal(err)
	}
	e.post(listEvent("m3", "email.bounced", "gone@example.com", past.Add(-time.Second)), "")
	if e.onList("gone@example.com") {
		t.Error("a bounce created before Unsuppress put the address back on the list")
	}

	// A hand-made change applies even over an event stamped ahead of the
	// database's clock (the API's clock runs ahead): the operator asked.
	e.post(listEvent("m4", "email.bounced", "ahead@example.com", time.Now().Add(time.Hour)), "")
	if n, err := e.ob.Unsuppress(ctx, []string{"ahead@example.com"}); err != nil || n != 1 {
		t.Fatalf("Unsuppress = %d, %v; want 1", n, err)
	}
	if e.onList("ahead@example.com") {
		t.Error("Unsuppress did not take off an address bounced by an event stamped an hour ahead")
	}
}

// TestSuppressionDeferredUsesEventTime: an email event that names no
// address is applied when it matches its intent, at its own time: a
// removal created after it, and applied before it, stands.
func TestSuppressionDeferredUsesEventTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	t0 := time.Now().Add(-time.Minute)
	e.enqueue("invoice:d")
	// A complaint about the send (no address: it waits for the send's record).
	e.post(evBody("d1", "email.complained", "em_d", t0), "")
	// The API took ada off its list after the complaint.
	e.post(listEvent("d2", "suppression.removed", "ada@example.com", t0.Add(10*time.Second)), "")
	e.send("invoice:d", "em_d") // the complaint matches now
	if e.onList("ada@example.com") {
		t.Error("a complaint applied at match time undid a later removal")
	}
	if got := e.status("invoice:d"); got != "complained" {
		t.Errorf("delivery %q, want complained", got)
	}
}

// TestSuppressionConcurrentEvents: events about one address posted at once,
// in no order, leave what the latest of them says.
func TestSuppressionConcurrentEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for round := range 5 {
		addr := fmt.Sprintf("c%d@example.com", round)
		const n = 12
		latest, latestAdd := -1, false
		var bodies []string
		for i := range n {
			// Times 0..n-1 shuffled by the round, adds and removals mixed.
			s := (i*7 + round*5) % n
			add := (i+round)%3 != 0
			typ := "suppression.removed"
			if add {
				typ = "email.bounced"
			}
			if s > latest {
				latest, latestAdd = s, add
			}
			bodies = append(bodies, listEvent(fmt.Sprintf("c%d_%d", round, i), typ, addr, t0.Add(time.Duration(s)*time.Second)))
		}
		done := make(chan int, n)
		for _, b := range bodies {
			// Not e.post: its response log is not for several goroutines.
			go func() {
				req := httptest.NewRequest(http.MethodPost, "/webhooks/openemail", strings.NewReader(b))
				req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, time.Now(), []byte(b)))
				rec := httptest.NewRecorder()
				e.h.ServeHTTP(rec, req)
				done <- rec.Code
			}()
		}
		for range n {
			if got := <-done; got != 200 {
				t.Fatalf("round %d: status %d", round, got)
			}
		}
		if got := e.onList(addr); got != latestAdd {
			t.Errorf("round %d: on the list %v, want %v (the latest event, at t0+%d s)", round, got, latestAdd, latest)
		}
	}
}
