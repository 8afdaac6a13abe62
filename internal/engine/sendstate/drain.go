package sendstate

import (
	"context"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/outbox"
)

// dueSQL is when a job-less pending intent of the outbox row aliased o is
// due: its next attempt's time (a drained retry), its send_at, or its
// creation. It is the second column of sendonce_outbox_due_idx (migration
// 00024), written the same way so that the index serves the claim's order.
const dueSQL = `coalesce(o.next_attempt_at, o.send_at, o.created_at)`

// CoalesceGrace is how much longer than the coalesce wait the claim holds
// an email intent that Batcher.FreezeDue may batch: FreezeDue freezes a
// partial batch once the wait has passed since its oldest intent came due,
// and the grace leaves the drain that long to run it (its timer wakes it
// then) before a claim may take one of those intents alone.
const CoalesceGrace = 100 * time.Millisecond

// holdSeconds is how long, in seconds, a claim with a coalesce wait holds
// an intent FreezeDue may batch (see unheldSQL): the wait and
// CoalesceGrace, or zero when coalescing is off.
func holdSeconds(wait time.Duration) float64 {
	if wait <= 0 {
		return 0
	}
	return (wait + CoalesceGrace).Seconds()
}

// unheldSQL is the SQL condition that the due outbox row aliased o is not
// held for coalescing, hold being the float8 seconds expression of
// holdSeconds (zero: coalescing is off). A never-attempted email intent in
// no batch is held until hold has passed since it came due:
// Batcher.FreezeDue may gather it into a batch until then (see
// ClaimOptions.CoalesceWait). Any other intent (another kind, a retry, an
// intent released by a split) is not held.
func unheldSQL(hold string) string {
	return `(` + hold + ` <= 0 OR o.kind <> 'email' OR o.attempts > 0 OR o.batch_key IS NOT NULL
		OR ` + dueSQL + ` + ` + hold + ` * interval '1 second' <= now())`
}

// DrainClaim is one intent that ClaimDue claimed.
type DrainClaim struct {
	Claimed
	// RateLimited is the intent's 429s in a row before this attempt.
	RateLimited int
	// RunKey is the intent's run, or "": a send of a run is bulk.
	RunKey string
	// Tries is this attempt's number as River numbers a job's: the claims
	// whose attempt counted, this one included (a snooze, or a send cut
	// off by a stop or a crash, gives its try back). MaxAttempts and the
	// backoff read it.
	Tries int
}

// ClaimDue claims up to n due intents of opts.Queue that have no River job
// of their own (job_id NULL: the drain's intents) in one statement and commits the claim
// before it returns, so that no send starts before its claim is durable:
// the rows are read to the end of RETURNING first. It takes intents
// without a run (transactional) before those of runs (bulk), each in due
// order, skips intents of paused runs and rows other drains have locked
// (SKIP LOCKED), and sets each claimed row as ClaimMany does: one attempt
// more, sending, owned by opts.Owner, the suppression list looked up at
// the first claim. With opts.CoalesceWait it holds the email intents that
// FreezeDue may still batch until that wait has passed (see unheldSQL).
//
// With an owner, nothing is claimed unless the owner's lease is held; when
// it is not, ClaimDue returns ErrLeaseLost.
func ClaimDue(ctx context.Context, db DB, n int, opts ClaimOptions) ([]*DrainClaim, error) {
	if n <= 0 {
		return nil, nil
	}
	var owner *int32
	if opts.Owner != 0 {
		owner = &opts.Owner
	}
	rows, err := db.Query(ctx, `WITH due AS (
			SELECT o.id AS due_id FROM sendonce_outbox o
			WHERE o.state = 'pending' AND o.job_id IS NULL AND `+dueSQL+` <= now() AND o.queue = $5
				AND (o.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run run WHERE run.key = o.run_key AND run.state = 'paused'))
				AND ($3::int4 IS NULL OR `+held("$3::int4")+`)
				AND `+unheldSQL("$6::float8")+`
			ORDER BY (o.run_key IS NOT NULL), `+dueSQL+`, o.id
			LIMIT $1 FOR UPDATE OF o SKIP LOCKED)
		UPDATE sendonce_outbox o
		SET `+claimSet("o", "o.state")+`,
			suppressed_recipients = CASE
				WHEN o.first_attempt_at IS NOT NULL THEN o.suppressed_recipients
				WHEN (SELECT EXISTS (SELECT 1 FROM sendonce_suppression))
					OR (o.topic IS NOT NULL AND (SELECT EXISTS (SELECT 1 FROM sendonce_unsubscribe)))
					THEN `+suppressedSQL+` END,
			next_attempt_at = NULL, tries = o.tries + 1, updated_at = now()
		FROM due WHERE o.id = due.due_id
		RETURNING `+claimColumns+`, o.rate_limited, coalesce(o.run_key, ''), o.tries,
			extract(epoch FROM o.first_attempt_at + $2::float8 * interval '1 second' - now())::float8`,
		n, opts.ReplayWindow.Seconds(), owner, opts.KeyFingerprint, queueOrDefault(opts.Queue), holdSeconds(opts.CoalesceWait))
	if err != nil {
		return nil, fmt.Errorf("sendstate: claim due intents: %w", err)
	}
	// Every row is read, and the rows closed (which reads the server's
	// answer to its end: with a pool, the statement's own transaction has
	// committed by then), before any claim is handed out.
	var out []*DrainClaim
	for rows.Next() {
		var limited, tries int
		var run string
		var left float64
		rec, err := scanClaimed(rows, &limited, &run, &tries, &left)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("sendstate: claim due intents: %w", err)
		}
		out = append(out, &DrainClaim{RateLimited: limited, RunKey: run, Tries: tries,
			Claimed: Claimed{Record: rec, WindowLeft: time.Duration(left * float64(time.Second)), Owner: opts.Owner}})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sendstate: claim due intents: %w", err)
	}
	if opts.Owner != 0 && len(out) == 0 {
		ok, err := LeaseHeld(ctx, db, opts.Owner)
		if err != nil {
			return nil, fmt.Errorf("sendstate: claim due intents: %w", err)
		}
		if !ok {
			return nil, fmt.Errorf("sendstate: claim due intents: %w", ErrLeaseLost)
		}
	}
	return out, nil
}

// AnyDue reports whether a claim would find a due intent of the drain of
// queue ("" is outbox.DefaultQueue) now (job-less, pending, due, not of a
// paused run, and not held for coalescing by coalesceWait, as
// ClaimOptions.CoalesceWait holds it), without claiming or
// locking anything: a drain with nothing to do looks with it before it
// takes a token of the fleet's budget. One probe of the due index.
func AnyDue(ctx context.Context, db DB, queue string, coalesceWait time.Duration) (bool, error) {
	var due bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sendonce_outbox o
		WHERE o.state = 'pending' AND o.job_id IS NULL AND `+dueSQL+` <= now() AND o.queue = $1
			AND (o.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run run WHERE run.key = o.run_key AND run.state = 'paused'))
			AND `+unheldSQL("$2::float8")+`)`,
		queueOrDefault(queue), holdSeconds(coalesceWait)).Scan(&due)
	if err != nil {
		return false, fmt.Errorf("sendstate: look for due intents: %w", err)
	}
	return due, nil
}

// NextDue is AnyDue for a drain that sleeps until its queue's next intent
// comes due: it reports whether a claim would find a due intent now and,
// when none is due, how long until the first of the pending intents of
// queue comes due (by the database's clock; ok false when none is pending
// with a due time ahead). An intent of a paused run does not count; one
// held for coalescing is woken by the coalescer's own timer. One
// statement: AnyDue's probe, and the first entry past now of each half of
// the due index (outside runs, and of runs).
func NextDue(ctx context.Context, db DB, queue string, coalesceWait time.Duration) (due bool, next time.Duration, ok bool, err error) {
	var in *float64
	err = db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sendonce_outbox o
		WHERE o.state = 'pending' AND o.job_id IS NULL AND `+dueSQL+` <= now() AND o.queue = $1
			AND (o.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run run WHERE run.key = o.run_key AND run.state = 'paused'))
			AND `+unheldSQL("$2::float8")+`),
		(SELECT extract(epoch FROM min(n.at) - now())::float8 FROM (
			(SELECT `+dueSQL+` AS at FROM sendonce_outbox o
				WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = false AND `+dueSQL+` > now() AND o.queue = $1
				ORDER BY (o.run_key IS NOT NULL), `+dueSQL+` LIMIT 1)
			UNION ALL
			(SELECT `+dueSQL+` AS at FROM sendonce_outbox o
				WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = true AND `+dueSQL+` > now() AND o.queue = $1
					AND NOT EXISTS (SELECT 1 FROM sendonce_run run WHERE run.key = o.run_key AND run.state = 'paused')
				ORDER BY (o.run_key IS NOT NULL), `+dueSQL+` LIMIT 1)) n)`,
		queueOrDefault(queue), holdSeconds(coalesceWait)).Scan(&due, &in)
	if err != nil {
		return false, 0, false, fmt.Errorf("sendstate: look for due intents: %w", err)
	}
	if in != nil {
		next, ok = time.Duration(*in*float64(time.Second)), true
	}
	return due, next, ok, nil
}

// queueOrDefault is queue, or outbox.DefaultQueue for "".
func queueOrDefault(queue string) string {
	if queue == "" {
		return outbox.DefaultQueue
	}
	return queue
}
