package client

import "fmt"

// RequestOption adjusts one call: the idempotency key of a send, or how a
// raw request (Client.Do) is classified for retries.
type RequestOption func(*requestOptions) error

type requestOptions struct {
	idempotencyKey    string
	hasIdempotencyKey bool
	repeatable        bool
	call              string
}

// WithIdempotencyKey sends key as the Idempotency-Key instead of a generated
// one. Derive it from the cause of the send ("invoice:inv_4192"), never from
// a clock: a job that crashed and ran again then replays its send instead of
// repeating it. The key is checked with ValidateIdempotencyKey before anything
// is sent.
//
// On a raw request (Client.Do) it attaches the header too, but does not make
// the request repeatable; add Repeatable for that.
func WithIdempotencyKey(key string) RequestOption {
	return func(o *requestOptions) error {
		if err := ValidateIdempotencyKey(key); err != nil {
			return err
		}
		o.idempotencyKey, o.hasIdempotencyKey = key, true
		return nil
	}
}

// Repeatable marks a raw request (Client.Do) as safe to send again, so a
// non-GET is retried like a GET. Use it only when a second identical request
// cannot mean anything other than the first; ForCall does this by the
// contract's table. The wrapped calls (c.Emails.Send and the rest) ignore
// it: their verdict comes from the contract's table.
func Repeatable() RequestOption {
	return func(o *requestOptions) error {
		o.repeatable = true
		return nil
	}
}

// ForCall names the contract call a raw request (Client.Do) makes, so it is
// retried exactly when the contract says ("contacts.update": yes,
// "drafts.create": no). A name the contract does not know is an error before
// anything is sent: a typo must not silently change how a write is retried.
// GET requests are retried whatever the name. The wrapped calls ignore it.
func ForCall(name string) RequestOption {
	return func(o *requestOptions) error {
		if _, known := IsRepeatable(name); !known {
			return fmt.Errorf("%w: ForCall: the retry contract names no call %q", ErrInvalidRequest, name)
		}
		o.call = normaliseCallName(name)
		return nil
	}
}

func applyRequestOptions(opts []RequestOption) (*requestOptions, error) {
	o := &requestOptions{}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}
