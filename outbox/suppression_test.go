package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

func TestSuppressionList(t *testing.T) {
	t.Parallel()
	pool, ob := outboxtest.New(t)
	ctx := context.Background()
	n, err := ob.Suppress(ctx, []string{"Ada <ADA@example.com>", "bo@example.com", "bo@example.com"}, "ops")
	if err != nil || n != 2 {
		t.Fatalf("suppress: %d, %v; want 2 added", n, err)
	}
	if n, err := ob.Suppress(ctx, []string{"ada@example.com"}, ""); err != nil || n != 0 {
		t.Fatalf("suppress again: %d, %v; want 0", n, err)
	}
	list, err := ob.Suppressions(ctx, &outbox.SuppressionParams{Limit: 1})
	if err != nil || len(list) != 1 || list[0].Address != "ada@example.com" || list[0].Reason != outbox.SuppressedManual || list[0].Source != "ops" {
		t.Fatalf("first page %+v, %v", list, err)
	}
	list, err = ob.Suppressions(ctx, &outbox.SuppressionParams{After: list[0].Address})
	if err != nil || len(list) != 1 || list[0].Address != "bo@example.com" {
		t.Fatalf("second page %+v, %v", list, err)
	}
	if n, err := ob.Unsuppress(ctx, []string{"BO@example.com", "nobody@example.com"}); err != nil || n != 1 {
		t.Fatalf("unsuppress: %d, %v; want 1", n, err)
	}

	for _, c := range []struct {
		addrs []string
		want  string
	}{
		{nil, "needs at least one address"},
		{[]string{"ok@example.com", "not-an-address"}, `address[1]: "not-an-address" is not an email address`},
		{[]string{"@example.com"}, "is not an email address"},
		{[]string{"ada@"}, "is not an email address"},
		{[]string{"a da@example.com"}, "has a space inside the address"},
		{[]string{"ada@example.com (Ada)"}, `address[0]: "ada@example.com (Ada)" has a comment in parentheses; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches: use "Ada <ada@example.com>"`},
		{[]string{strings.Repeat("a", 320) + "@example.com"}, "over 320"},
	} {
		_, err := ob.Suppress(ctx, c.addrs, "")
		var inv *outbox.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Suppress(%q): %v, want an InvalidError with %q", c.addrs, err, c.want)
		}
	}
	if _, err := ob.Suppressions(ctx, &outbox.SuppressionParams{Reason: "spam"}); err == nil || !strings.Contains(err.Error(), `unknown reason "spam"`) {
		t.Errorf("Suppressions with a bad reason: %v", err)
	}
	if n := outboxtest.Value[int](t, pool, `SELECT count(*) FROM sendonce_suppression`); n != 1 {
		t.Fatalf("%d suppressed, want 1 (nothing written by the refused calls)", n)
	}
	// The database refuses what the Go API would: plain SQL gets the same rules.
	if _, err := pool.Exec(ctx, `INSERT INTO sendonce_suppression (address, reason) VALUES ('Ada@Example.com', 'manual')`); err == nil {
		t.Error("the table took an address not in normal form")
	}
}

// Unsubscriptions of every topic (Topic empty) lists them in topic and
// address order and pages with the documented "topic\x00address" cursor.
// It used to send the cursor and a chr(0) to PostgreSQL, whose text holds
// no NUL: every call failed with SQLSTATE 54000 once any address was
// unsubscribed.
func TestUnsubscriptionsOfEveryTopicPage(t *testing.T) {
	t.Parallel()
	_, ob := outboxtest.New(t)
	ctx := context.Background()
	for _, u := range [][2]string{{"bo@example.com", "news"}, {"ada@example.com", "news"}, {"ada@example.com", "digest"}} {
		if _, err := ob.Unsubscribe(ctx, u[0], u[1], "test"); err != nil {
			t.Fatalf("unsubscribe %v: %v", u, err)
		}
	}
	first, err := ob.Unsubscriptions(ctx, &outbox.UnsubscriptionParams{Limit: 2})
	if err != nil || len(first) != 2 || first[0].Topic != "digest" || first[1].Topic != "news" || first[1].Address != "ada@example.com" {
		t.Fatalf("first page %+v, %v; want digest/ada, news/ada", first, err)
	}
	after := first[1].Topic + "\x00" + first[1].Address
	rest, err := ob.Unsubscriptions(ctx, &outbox.UnsubscriptionParams{After: after})
	if err != nil || len(rest) != 1 || rest[0].Topic != "news" || rest[0].Address != "bo@example.com" {
		t.Fatalf("second page %+v, %v; want news/bo alone", rest, err)
	}
}
