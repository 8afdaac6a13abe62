package outbox

import (
	"errors"
	"fmt"
)

// ErrInvalid matches (errors.Is) every *InvalidError.
var ErrInvalid = errors.New("outbox: invalid intent")

// ErrNotFound is returned when no intent has the given key.
var ErrNotFound = errors.New("outbox: no intent with that key")

// ErrKeyReuse matches (errors.Is) every *KeyReuseError.
var ErrKeyReuse = errors.New("outbox: idempotency key reused with a different payload")

// KeyReuseError is returned when an intent is enqueued with the key of an
// existing intent but a different kind, template or payload: the outbox's
// mirror of the API's 422 idempotency_key_reuse, caught before any network
// call. Nothing has been written when it is returned.
type KeyReuseError struct {
	Key string
	// Index is the intent's position in an EnqueueMany call, or -1.
	Index int
}

func (e *KeyReuseError) Error() string {
	prefix := "outbox"
	if e.Index >= 0 {
		prefix = fmt.Sprintf("outbox: intent %d", e.Index)
	}
	return fmt.Sprintf("%s: idempotency key %q is already used by an intent with a different kind, template or payload (idempotency_key_reuse)", prefix, e.Key)
}

// Is makes errors.Is(err, ErrKeyReuse) true.
func (e *KeyReuseError) Is(target error) bool { return target == ErrKeyReuse }

// StateError is returned when an operation does not fit the intent's state,
// such as cancelling an intent whose send has started.
type StateError struct {
	Key    string
	Op     string
	State  State
	Reason string

	err error // a sentinel the error matches, if any
}

// Unwrap returns the sentinel the error matches, such as ErrMayDeliverTwice.
func (e *StateError) Unwrap() error { return e.err }

func (e *StateError) Error() string {
	return fmt.Sprintf("outbox: cannot %s intent %q (state %s): %s", e.Op, e.Key, e.State, e.Reason)
}
