package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/sendonce/sendonce/client"
)

// Client.Do reaches endpoints this package does not wrap. A write is sent
// once unless marked Repeatable, which the retry contract allows for
// contacts.update (it sets named fields) but not for drafts.create (a retry
// would leave two drafts).
func ExampleClient_Do() {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attempts.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		fmt.Fprint(w, `{"id":"ct_1","firstName":"Ada"}`)
	}))
	defer srv.Close()

	c, err := client.New(client.WithAPIKey("oe_test_example"), client.WithBaseURL(srv.URL), client.WithSleep(noWait))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	var contact struct{ ID, FirstName string }
	err = c.Do(ctx, "PATCH", "/contacts/ct_1", map[string]string{"firstName": "Ada"}, &contact, client.Repeatable())
	fmt.Println(contact.ID, contact.FirstName, err, "attempts:", attempts.Load())

	attempts.Store(0)
	err = c.Do(ctx, "POST", "/drafts", map[string]string{"subject": "Draft"}, nil)
	fmt.Println(err, "attempts:", attempts.Load())

	// Output:
	// ct_1 Ada <nil> attempts: 2
	// client: 502 api_error/unrecognised_response: The API responded 502 with a body this client did not recognise. attempts: 1
}

func noWait(ctx context.Context, _ time.Duration) error { return ctx.Err() }
