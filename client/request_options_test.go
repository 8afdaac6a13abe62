package client

import (
	"context"
	"testing"
)

func TestForCallUnknownNameRefused(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, okEmail)
	c, _ := newTestClient(t, api.URL)
	err := c.Do(context.Background(), "POST", "/contacts", nil, nil, ForCall("contacts.updaet"))
	if err == nil || api.count() != 0 {
		t.Fatalf("err = %v, requests = %d; want an error before sending", err, api.count())
	}
}

func TestRequestOptions(t *testing.T) {
	t.Parallel()
	o, err := applyRequestOptions([]RequestOption{nil, Repeatable(), WithIdempotencyKey("k:1"), ForCall("contacts.updateCard")})
	if err != nil || !o.repeatable || o.idempotencyKey != "k:1" || !o.hasIdempotencyKey || o.call != "contacts.update_card" {
		t.Fatalf("got %+v, %v", o, err)
	}
	if _, err := applyRequestOptions([]RequestOption{WithIdempotencyKey("k 1")}); !IsInvalidIdempotencyKey(err) {
		t.Fatalf("err = %v", err)
	}
}
