package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

func (e *env) suppressions() string {
	e.t.Helper()
	list, err := e.ob.Suppressions(context.Background(), &outbox.SuppressionParams{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, s := range list {
		out = append(out, s.Address+" "+string(s.Reason)+" "+s.Source)
	}
	return strings.Join(out, "; ")
}

func TestEventsKeepTheSuppressionList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now()
	post := func(delivery, body string) {
		t.Helper()
		if got := e.post(body, delivery); got != 200 {
			t.Fatalf("%s: status %d", delivery, got)
		}
	}
	evAt := func(at time.Time, id, typ, data string) string {
		return fmt.Sprintf(`{"id":%q,"type":%q,"createdAt":%q,"data":%s}`, id, typ, at.UTC().Format(time.RFC3339), data)
	}
	ev := func(id, typ, data string) string { return evAt(now, id, typ, data) }

	// A hard bounce naming its recipient suppresses it at once, matched or
	// not; the same delivery again changes nothing.
	post("d1", ev("e1", "email.bounced", `{"emailId":"em_x","to":["Bo <BO@example.com>"]}`))
	post("d1", ev("e1", "email.bounced", `{"emailId":"em_x","to":["Bo <BO@example.com>"]}`))
	// A soft bounce does not.
	post("d2", ev("e2", "email.bounced", `{"emailId":"em_y","to":"soft@example.com","bounce":{"type":"Transient"}}`))
	// An event that names no address waits for its intent: a complaint
	// about a send not recorded yet suppresses nothing until it matches.
	e.enqueue("invoice:c")
	post("d3", ev("e3", "email.complained", `{"emailId":"em_c"}`))
	if got := e.suppressions(); got != "bo@example.com bounced webhook d1" {
		t.Fatalf("after the bounces: %q", got)
	}
	e.send("invoice:c", "em_c") // the sweeper's sendstate.MatchEvents matches it
	if got := e.suppressions(); got != "ada@example.com complained webhook d3; bo@example.com bounced webhook d1" {
		t.Fatalf("after the complaint matched: %q", got)
	}
	// The API's own list: added, then removed (after the bounce: at the
	// bounce's own instant the bounce would win).
	post("d4", ev("e4", "suppression.added", `{"email":"Cy@Example.com"}`))
	post("d5", evAt(now.Add(time.Second), "e5", "suppression.removed", `{"email":"bo@example.com"}`))
	if got := e.suppressions(); got != "ada@example.com complained webhook d3; cy@example.com api webhook d4" {
		t.Fatalf("after the API's changes: %q", got)
	}
	if n := outboxtest.Value[int](t, e.pool, `SELECT count(*) FROM sendonce_event`); n != 5 {
		t.Fatalf("%d events stored, want 5", n)
	}
}
