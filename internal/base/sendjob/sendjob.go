// Package sendjob defines the River job that sends one intent: its
// arguments, its kind and how it is inserted. The outbox inserts it, the
// worker works it, and the sweeper inserts it again for an intent left
// without a working job; all three agree here.
package sendjob

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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

// Give gives new River jobs to rows, in tx: query selects the rows, locked;
// job makes the id of each row and its job from the row scanned; update
// then runs with the rows' ids ($1) and their new jobs' ids ($2), in
// order, to name the jobs on the rows. It returns how many rows it gave
// jobs to. The run operations (store.GiveRunBatchJobs) and the test kit
// give jobs this way; the sweeper's rescue and reconcile do the same steps
// with store's select and set statements.
func Give(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], query string, args []any,
	job func(pgx.Rows) (int64, river.InsertManyParams, error), update string) (int, error) {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	var ids []int64
	var params []river.InsertManyParams
	for rows.Next() {
		id, p, err := job(rows)
		if err != nil {
			rows.Close()
			return 0, err
		}
		ids, params = append(ids, id), append(params, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, err
	}
	jobs, err := rc.InsertManyTx(ctx, tx, params)
	if err != nil {
		return 0, fmt.Errorf("insert river jobs: %w", err)
	}
	jobIDs := make([]int64, len(jobs))
	for i, j := range jobs {
		jobIDs[i] = j.Job.ID
	}
	if _, err := tx.Exec(ctx, update, ids, jobIDs); err != nil {
		return 0, err
	}
	return len(ids), nil
}
