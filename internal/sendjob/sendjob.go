// Package sendjob defines the River job that sends one intent: its
// arguments, its kind and how it is inserted. The outbox inserts it, the
// worker works it, and the sweeper inserts it again for an intent left
// without a working job; all three agree here.
package sendjob

import (
	"time"

	"github.com/riverqueue/river"
)

// Args are the arguments of the River job that sends one intent. The job
// carries the key and the intent's kind: the outbox row is the source of
// truth, read afresh on every attempt. The kind (empty in jobs written
// before it was added) only lets a coalescing worker tell, before any
// query, which jobs may join a batch.
type Args struct {
	Key        string `json:"key"`
	IntentKind string `json:"kind,omitempty"`
	// RunKey names the run the intent belongs to, if any: a batch never
	// mixes runs.
	RunKey string `json:"run,omitempty"`
}

// Kind is the River job kind of a send job.
func (Args) Kind() string { return "sendonce_send" }

// MaxAttempts is River's attempt limit for a send job. The worker gives up
// sooner by its own limit and replay window; this only keeps River from
// discarding a job before the worker has recorded why.
const MaxAttempts = 100

// River priorities of send jobs (1 runs first). Intents rescued from a
// crashed worker, and those an operator retries, go ahead of the queue: an
// uncertain intent's replay window is running, and the backlog of a billing
// run must not hold it back.
const (
	PriorityNormal = 2
	PriorityUrgent = 1
	// PriorityBulk is the members of runs: a campaign's backlog never
	// holds back a lone transactional email.
	PriorityBulk = 3
)

// InsertOpts are the options of a send job on queue, held until sendAt
// (zero: now).
func InsertOpts(queue string, sendAt time.Time, priority int) *river.InsertOpts {
	return &river.InsertOpts{Queue: queue, MaxAttempts: MaxAttempts, ScheduledAt: sendAt, Priority: priority}
}

// BatchArgs are the arguments of the River job that sends one frozen batch
// of coalesced email intents (table sendonce_batch) under the batch's key.
type BatchArgs struct {
	Key string `json:"key"`
	// RunKey names the run whose members the batch holds, if any.
	RunKey string `json:"run,omitempty"`
}

// Kind is the River job kind of a batch job.
func (BatchArgs) Kind() string { return "sendonce_batch" }

// PriorityFor is the priority of a new job for an intent of run (empty for
// a lone intent).
func PriorityFor(run string) int {
	if run != "" {
		return PriorityBulk
	}
	return PriorityNormal
}
