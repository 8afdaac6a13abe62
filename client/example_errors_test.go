package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sendonce/sendonce/client"
)

// Errors from the API are *client.APIError; helpers answer the questions a
// caller usually has. Here the key was used before with a different body.
func ExampleAPIError() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req_123")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"error":{"type":"validation_error","code":"idempotency_key_reuse","message":"This key was used with a different body."}}`)
	}))
	defer srv.Close()

	c, err := client.New(client.WithAPIKey("oe_test_example"), client.WithBaseURL(srv.URL))
	if err != nil {
		panic(err)
	}
	_, err = c.Emails.Send(context.Background(), &client.EmailParams{To: client.Recipients{"ada@example.com"}, Text: "changed"},
		client.WithIdempotencyKey("invoice:inv_4192"))

	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Code, apiErr.RequestID)
	}
	fmt.Println(err)
	fmt.Println("reuse:", client.IsIdempotencyKeyReuse(err), "permanent:", client.IsPermanent(err))

	// Output:
	// 422 idempotency_key_reuse req_123
	// client: 422 validation_error/idempotency_key_reuse: This key was used with a different body. [request req_123]
	// reuse: true permanent: true
}

// A caller key the API would refuse is refused before anything is sent.
func ExampleValidateIdempotencyKey() {
	fmt.Println(client.ValidateIdempotencyKey("invoice:inv_4192"))
	err := client.ValidateIdempotencyKey("invoice 4192")
	fmt.Println(err)
	fmt.Println(client.IsInvalidIdempotencyKey(err))

	// Output:
	// <nil>
	// client: invalid_idempotency_key: idempotency key has byte 0x20 at offset 7; allowed are A-Z a-z 0-9 _ . : -
	// true
}
