package outbox

import (
	"time"

	"github.com/riverqueue/river"
)

// SendArgs are the arguments of the River job that sends one intent. The
// job carries only the key: the outbox row is the source of truth, read
// afresh on every attempt.
type SendArgs struct {
	Key string `json:"key"`
}

// Kind is the River job kind of a send job.
func (SendArgs) Kind() string { return "sendonce_send" }

func (o *Outbox) insertOpts(sendAt time.Time) *river.InsertOpts {
	return &river.InsertOpts{Queue: o.queue, MaxAttempts: DefaultMaxAttempts, ScheduledAt: sendAt}
}
