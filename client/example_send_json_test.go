package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/sendonce/sendonce/client"
)

// An outbox stores the body of a send as JSON in the caller's transaction;
// a worker sends it later with SendJSON under the stored key. The body goes
// out as stored but for the contract's wire rules: a single recipient
// becomes a list and times go out in UTC with milliseconds. Fields this
// package does not model (tracking here) pass through untouched.
func ExampleEmailsService_SendJSON() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Println(r.Header.Get("Idempotency-Key"), string(body))
		fmt.Fprint(w, `{"id":"em_1","status":"scheduled"}`)
	}))
	defer srv.Close()

	c, err := client.New(client.WithAPIKey("oe_test_example"), client.WithBaseURL(srv.URL))
	if err != nil {
		panic(err)
	}
	stored := json.RawMessage(`{"to":"ada@example.com","subject":"Welcome","text":"Hi","scheduledAt":"2030-06-01T14:30:00+02:00","tracking":{"opens":true}}`)
	email, err := c.Emails.SendJSON(context.Background(), stored, client.WithIdempotencyKey("welcome:ada"))
	if err != nil {
		panic(err)
	}
	fmt.Println(email.ID, email.Status)

	// Output:
	// welcome:ada {"scheduledAt":"2030-06-01T12:30:00.000Z","subject":"Welcome","text":"Hi","to":["ada@example.com"],"tracking":{"opens":true}}
	// em_1 scheduled
}
