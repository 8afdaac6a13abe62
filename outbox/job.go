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

// River priorities of send jobs (1 runs first). Intents rescued from a
// crashed worker, and those an operator retries, go ahead of the queue: an
// uncertain intent's replay window is running, and a backlog of a billing
// run must not hold it back.
const (
	priorityNormal = 2
	priorityUrgent = 1
)

func (o *Outbox) insertOpts(sendAt time.Time, priority int) *river.InsertOpts {
	return &river.InsertOpts{Queue: o.queue, MaxAttempts: DefaultMaxAttempts, ScheduledAt: sendAt, Priority: priority}
}
