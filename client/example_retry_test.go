package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/sendonce/sendonce/client"
)

// A send that meets a 503 is retried with the same idempotency key after a
// jittered backoff. WithSleep makes the wait observable (and instant) here.
func ExampleWithSleep() {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		if len(keys) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"id":"em_1","status":"queued"}`)
	}))
	defer srv.Close()

	var waits []time.Duration
	c, err := client.New(
		client.WithAPIKey("oe_test_example"),
		client.WithBaseURL(srv.URL),
		client.WithSleep(func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d)
			return ctx.Err()
		}),
	)
	if err != nil {
		panic(err)
	}
	email, err := c.Emails.Send(context.Background(), &client.EmailParams{To: client.Recipients{"ada@example.com"}, Text: "hi"})
	if err != nil {
		panic(err)
	}
	fmt.Println("sent:", email.ID)
	fmt.Println("attempts:", len(keys), "same key:", keys[0] == keys[1])
	fmt.Println("first wait within [250ms, 500ms]:", waits[0] >= 250*time.Millisecond && waits[0] <= 500*time.Millisecond)

	// Output:
	// sent: em_1
	// attempts: 2 same key: true
	// first wait within [250ms, 500ms]: true
}
