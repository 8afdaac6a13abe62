package client

// RequestOption adjusts one call: the idempotency key of a send, or how a
// raw request (Client.Do) is classified for retries.
type RequestOption func(*requestOptions) error

type requestOptions struct {
	idempotencyKey string // never empty when set: the key is validated
	repeatable     bool
	rateInfo       *RateInfo // WithRateInfo's
}

// noteRate keeps an answer's rate headers for WithRateInfo.
func (o *requestOptions) noteRate(r *RateInfo) {
	if o.rateInfo == nil {
		return
	}
	if r == nil {
		*o.rateInfo = RateInfo{}
		return
	}
	*o.rateInfo = *r
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
		o.idempotencyKey = key
		return nil
	}
}

// Repeatable marks a raw request (Client.Do) as safe to send again, so a
// non-GET is retried like a GET. Use it only when the retry contract's
// table (client/testdata/retry-contract-table.md) says the call is retried: a second identical
// request cannot mean anything other than the first. The wrapped calls
// (c.Emails.Send and the rest) ignore it: their verdict is the contract's.
func Repeatable() RequestOption {
	return func(o *requestOptions) error {
		o.repeatable = true
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
