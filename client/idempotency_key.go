package client

import (
	"fmt"

	"github.com/google/uuid"
)

// maxIdempotencyKeyLen is the longest key the API accepts.
const maxIdempotencyKeyLen = 255

// generatedKeyPrefix marks keys this client made, as the official SDKs do.
const generatedKeyPrefix = "oe-"

// ValidateIdempotencyKey reports whether the API would accept key: 1 to 255
// characters, each a letter, a digit, '_', '.', ':' or '-'. It returns nil or
// an *IdempotencyKeyError (Code invalid_idempotency_key) whose message does
// not repeat the key.
//
// The client calls it on every caller-supplied key before sending anything,
// so a bad key costs no request. Code that stores keys for later sends (an
// outbox) should call it when the key is accepted, so the mistake surfaces
// where it was made rather than in a background worker.
func ValidateIdempotencyKey(key string) error {
	if key == "" {
		return &IdempotencyKeyError{Code: CodeInvalidIdempotencyKey, Reason: "idempotency key is empty"}
	}
	if len(key) > maxIdempotencyKeyLen {
		// Every allowed character is one byte, so a longer string is too
		// long whatever it holds.
		return &IdempotencyKeyError{
			Code:   CodeInvalidIdempotencyKey,
			Reason: fmt.Sprintf("idempotency key is %d bytes long; the limit is %d characters", len(key), maxIdempotencyKeyLen),
		}
	}
	for i := 0; i < len(key); i++ {
		if !isKeyByte(key[i]) {
			return &IdempotencyKeyError{
				Code:   CodeInvalidIdempotencyKey,
				Reason: fmt.Sprintf("idempotency key has byte 0x%02x at offset %d; allowed are A-Z a-z 0-9 _ . : -", key[i], i),
			}
		}
	}
	return nil
}

func isKeyByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '_', c == '.', c == ':', c == '-':
		return true
	}
	return false
}

// newIdempotencyKey makes the key for a send whose caller gave none: "oe-"
// and a random (version 4) UUID, 39 characters. It is made once per call, so
// every retry of that call carries the same key and replays instead of
// sending twice, while a second call gets a second key and sends again.
func newIdempotencyKey() (string, error) {
	id, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("client: generating idempotency key: %w", err)
	}
	return generatedKeyPrefix + id.String(), nil
}
