package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// statusLog is a status hook that keeps what it is told of in the
// application's table app_status, in the recording transaction, and can be
// made to fail.
type statusLog struct {
	told []outbox.Status
	fail error
}

func (l *statusLog) hook(ctx context.Context, tx pgx.Tx, statuses []outbox.Status) error {
	for _, s := range statuses {
		if _, err := tx.Exec(ctx, `INSERT INTO app_status (key, transition) VALUES ($1, $2)`, s.Key, string(s.Transition)); err != nil {
			return err
		}
	}
	if l.fail != nil {
		return l.fail
	}
	l.told = append(l.told, statuses...)
	return nil
}

// take returns the transitions told since the last take, as key:transition.
func (l *statusLog) take() []string {
	var out []string
	for _, s := range l.told {
		out = append(out, s.Key+":"+string(s.Transition))
	}
	l.told = nil
	return out
}

func newStatusEnv(t *testing.T) (*env, *statusLog) {
	e := newEnv(t)
	if _, err := e.pool.Exec(context.Background(), `CREATE TABLE app_status (key text, transition text, UNIQUE (key, transition))`); err != nil {
		t.Fatal(err)
	}
	l := &statusLog{}
	e.h.OnStatus(l.hook)
	return e, l
}

// The delivery statuses an event records are told to the hook once each,
// in the event's transaction: an event delivered again, or a second event
// of a status the intent has, tells nothing; a hook that fails answers
// 500 and stores nothing, and the event delivered again is told.
func TestOnStatusTellsDeliveryStatusesOnce(t *testing.T) {
	t.Parallel()
	e, l := newStatusEnv(t)
	e.enqueue("invoice:1")
	e.send("invoice:1", "em_1")
	t0 := time.Now().Add(-time.Minute)

	for i, step := range []struct {
		body string
		want []string
	}{
		{evBody("e1", "email.delivered", "em_1", t0), []string{"invoice:1:delivered"}},
		{evBody("e1", "email.delivered", "em_1", t0), nil},                  // delivered again
		{evBody("e2", "email.delivered", "em_1", t0.Add(time.Second)), nil}, // the status it has
		{evBody("e3", "email.opened", "em_1", t0.Add(2*time.Second)), nil},  // no transition
		{evBody("e4", "email.bounced", "em_1", t0.Add(3*time.Second)), []string{"invoice:1:bounced"}},
	} {
		if got := e.post(step.body, ""); got != http.StatusOK {
			t.Fatalf("step %d: status %d", i, got)
		}
		if got := l.take(); !slices.Equal(got, step.want) {
			t.Fatalf("step %d: told %v, want %v", i, got, step.want)
		}
	}

	events := e.events()
	l.fail = errors.New("the application's table is locked")
	complaint := evBody("e5", "email.complained", "em_1", t0.Add(4*time.Second))
	if got := e.post(complaint, ""); got != http.StatusInternalServerError {
		t.Fatalf("with a failing hook: status %d, want 500", got)
	}
	if e.events() != events || e.status("invoice:1") != outbox.DeliveryBounced {
		t.Fatalf("a failing hook left the event stored (%d events, want %d) or the status changed (%q)", e.events(), events, e.status("invoice:1"))
	}
	l.fail = nil
	if got := e.post(complaint, ""); got != http.StatusOK {
		t.Fatalf("delivered again: status %d", got)
	}
	if got := l.take(); !slices.Equal(got, []string{"invoice:1:complained"}) {
		t.Fatalf("delivered again: told %v, want the complaint", got)
	}
	if n := outboxtest.Value[int](t, e.pool, `SELECT count(*) FROM app_status`); n != 3 {
		t.Fatalf("%d rows of the application's, want 3 (delivered, bounced, complained)", n)
	}
}

// An event that came before its intent's send was recorded is matched by
// the worker's sweeper (MatchEvents) after the mark: the hook is told of
// the sent, then of the delivery, each once.
func TestOnStatusTellsALateMatch(t *testing.T) {
	t.Parallel()
	e, l := newStatusEnv(t)
	e.enqueue("invoice:late")
	if got := e.post(evBody("e1", "email.delivered", "em_late", time.Now()), ""); got != http.StatusOK {
		t.Fatalf("status %d", got)
	}
	if got := l.take(); len(got) != 0 {
		t.Fatalf("an unmatched event told %v", got)
	}
	ctx := sendstate.WithStatusHook(context.Background(), l.hook)
	if _, err := sendstate.MarkSent(ctx, e.pool, sendstate.Sent{Key: "invoice:late", MessageID: "em_late"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := sendstate.MatchEvents(ctx, e.pool); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.take(); !slices.Equal(got, []string{"invoice:late:sent", "invoice:late:delivered"}) {
		t.Fatalf("told %v, want sent then delivered", got)
	}
}
