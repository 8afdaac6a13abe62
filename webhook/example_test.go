package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/webhook"
)

// An application that reacts to bounces: it LISTENs on sendonce_delivery,
// where every change of an intent's delivery status is announced at commit
// as {"key": …, "status": …}.
func Example_listen() {
	ctx := context.Background()
	pool, done := pgtest.ExampleDB()
	defer done()

	// The application's listener, on a connection of its own.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN sendonce_delivery"); err != nil {
		panic(err)
	}

	// An intent, sent by a worker as message em_42.
	ob, err := outbox.New(pool, nil)
	if err != nil {
		panic(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Intent{Key: "welcome:user_42", Payload: outboxtest.InvoiceBody})
		return err
	}); err != nil {
		panic(err)
	}
	if _, err := sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "welcome:user_42", MessageID: "em_42"}); err != nil {
		panic(err)
	}

	// The API reports a bounce to the webhook endpoint.
	h, err := webhook.New(pool, []string{"whsec_example"}, nil)
	if err != nil {
		panic(err)
	}
	body := `{"id":"evt_1","type":"email.bounced","createdAt":"2026-12-01T08:00:00Z","data":{"emailId":"em_42"}}`
	req := httptest.NewRequest(http.MethodPost, "/webhooks/openemail", strings.NewReader(body))
	req.Header.Set(webhook.SignatureHeader, webhook.Sign("whsec_example", time.Now(), []byte(body)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println("webhook answered", rec.Code)

	// The application reacts.
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(waitCtx)
	if err != nil {
		panic(err)
	}
	var change struct{ Key, Status string }
	if err := json.Unmarshal([]byte(n.Payload), &change); err != nil {
		panic(err)
	}
	if change.Status == string(outbox.DeliveryBounced) {
		fmt.Printf("%s bounced: flag the address\n", change.Key)
	}
	// Output:
	// webhook answered 200
	// welcome:user_42 bounced: flag the address
}
