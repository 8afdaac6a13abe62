package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/sendonce/sendonce/client"
)

// fakeSends is a tiny stand-in for the API's idempotency: the first request
// with a key sends, later ones with the same key replay the stored email.
func fakeSends() (*httptest.Server, func() int) {
	var mu sync.Mutex
	byKey := map[string]string{}
	sent := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		id, replayed := byKey[key]
		if !replayed {
			sent++
			id = fmt.Sprintf("em_%d", sent)
			byKey[key] = id
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "status": "queued", "replayed": replayed})
	}))
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return sent }
}

// A key derived from the cause of the send (here, an invoice) makes a second
// attempt, even from another process after a crash, replay the first send
// instead of delivering the email twice.
func ExampleWithIdempotencyKey() {
	srv, sentCount := fakeSends()
	defer srv.Close()

	c, err := client.New(client.WithAPIKey("oe_test_example"), client.WithBaseURL(srv.URL))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	invoice := &client.EmailParams{
		From:    "billing@example.com",
		To:      client.Recipients{"ada@example.com"},
		Subject: "Your invoice",
		Text:    "Invoice attached.",
	}

	for _, attempt := range []string{"first run", "after a crash"} {
		email, err := c.Emails.Send(ctx, invoice, client.WithIdempotencyKey("invoice:inv_4192"))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s replayed=%v\n", attempt, email.ID, email.Replayed)
	}
	fmt.Println("emails delivered:", sentCount())

	// Output:
	// first run: em_1 replayed=false
	// after a crash: em_1 replayed=true
	// emails delivered: 1
}

// Without a caller key, each call gets a key of its own: two calls are two
// intents, and send twice.
func ExampleEmailsService_Send() {
	srv, sentCount := fakeSends()
	defer srv.Close()

	c, err := client.New(client.WithAPIKey("oe_test_example"), client.WithBaseURL(srv.URL))
	if err != nil {
		panic(err)
	}
	params := &client.EmailParams{From: "hello@example.com", To: client.Recipients{"ada@example.com"}, Subject: "Hi", Text: "Hello"}
	for range 2 {
		email, err := c.Emails.Send(context.Background(), params)
		if err != nil {
			panic(err)
		}
		fmt.Println(email.ID, email.Status, email.Replayed)
	}
	fmt.Println("emails delivered:", sentCount())

	// Output:
	// em_1 queued false
	// em_2 queued false
	// emails delivered: 2
}
