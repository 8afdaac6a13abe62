package client

import "testing"

func TestRequestOptions(t *testing.T) {
	t.Parallel()
	o, err := applyRequestOptions([]RequestOption{nil, Repeatable(), WithIdempotencyKey("k:1")})
	if err != nil || !o.repeatable || o.idempotencyKey != "k:1" {
		t.Fatalf("got %+v, %v", o, err)
	}
	if _, err := applyRequestOptions([]RequestOption{WithIdempotencyKey("k 1")}); !IsInvalidIdempotencyKey(err) {
		t.Fatalf("err = %v", err)
	}
}
