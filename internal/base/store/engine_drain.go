package store

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// The drain's statements (internal/engine/sendstate's ClaimDue, AnyDue and
// NextDue): the claim of due intents without a River job of their own, and
// the looks that tell a drain whether, or when, there is one.

// dueSQL is when a job-less pending intent of the outbox row aliased o is
// due: its next attempt's time (a drained retry), its send_at, or its
// creation. It is the third column of sendonce_outbox_tenant_due_idx
// (migration 00031), written the same way so that the index serves the
// claim's order.
const dueSQL = `coalesce(o.next_attempt_at, o.send_at, o.created_at)`

// tenantSQL is the tenant of the outbox row aliased o, the empty string for the default
// tenant: the second column of sendonce_outbox_tenant_due_idx, after the
// class (run_key IS NOT NULL).
const tenantSQL = `coalesce(o.tenant, '')`

// dueOrderSQL is the order of sendonce_outbox_tenant_due_idx: class, then
// tenant, then due time.
const dueOrderSQL = `(o.run_key IS NOT NULL), ` + tenantSQL + `, ` + dueSQL + `, o.id`

// notPausedSQL is the SQL condition that the outbox row aliased o is not
// a member of a paused run.
const notPausedSQL = `(o.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run run WHERE run.key = o.run_key AND run.state = 'paused'))`

// unheldSQL is the SQL condition that the due outbox row aliased o is not
// held for coalescing, hold being a float8 seconds expression (zero:
// coalescing is off). A never-attempted email intent in no batch is held
// until hold has passed since it came due: the coalescer
// (sendstate.Batcher.FreezeDue) may gather it into a batch until then. Any
// other intent (another kind, a retry, an intent released by a split) is
// not held.
func unheldSQL(hold string) string {
	return `(` + hold + ` <= 0 OR o.kind <> 'email' OR o.attempts > 0 OR o.batch_key IS NOT NULL
		OR ` + dueSQL + ` + ` + hold + ` * interval '1 second' <= now())`
}

// claimDueSQL is ClaimDueIntents' statement. It moves pending rows to
// sending, which the tallies count alike (migration 00028), so it appends
// nothing to them and says so (selfTallied): the tally's statement trigger
// stands aside.
var claimDueSQL = `WITH due AS (
			SELECT o.id AS due_id FROM sendonce_outbox o
			WHERE o.state = 'pending' AND o.job_id IS NULL AND ` + dueSQL + ` <= now() AND o.queue = $5
				AND ` + notPausedSQL + `
				AND ($3::int4 IS NULL OR ` + held("$3::int4") + `)
				AND ` + unheldSQL("$6::float8") + `
			ORDER BY ` + dueOrderSQL + `
			LIMIT $1 FOR UPDATE OF o SKIP LOCKED)
		UPDATE sendonce_outbox o
		SET ` + claimSet("o", "o.state") + `,
			` + claimSuppressedSet + `
			next_attempt_at = NULL, tries = o.tries + 1, updated_at = now()
		FROM due WHERE o.id = due.due_id
		RETURNING ` + claimColumns + `, o.rate_limited, coalesce(o.run_key, ''), o.tries,
			extract(epoch FROM o.first_attempt_at + $2::float8 * interval '1 second' - now())::float8, ` + tenantSQL + `, ` + selfTallied

// claimDueSmallSQL[1] is claimDueSQL for a claim of one intent (a slot
// that asks alone: the usual claim of a worker paced by a rate), LIMIT 1
// in its text. With LIMIT $1 the planner costs the generic plan for a tenth of
// the due rows, far above a custom plan of one row, so PostgreSQL plans
// every such claim anew: in the rate-limited benchmark (3 workers at
// 20/s), 2,688 plans of 2,995 claims at 1.2 ms each, half the database's
// CPU per intent. With LIMIT 1 the generic plan is chosen after the first
// five (87 plans of 3,004). $1 stays in a one-time filter, so both texts
// take the same arguments.
//
// The same holds for the small claims of a round where a few slots ask at
// once: up to claimDueSmall, each count has its own text, LIMIT n, and
// keeps its plan.
var claimDueSmallSQL = func() []string {
	out := make([]string, claimDueSmall+1)
	for n := 1; n <= claimDueSmall; n++ {
		out[n] = claimDueLimitSQL(n)
	}
	return out
}()

// claimDueSmall is the largest claim with a text of its own.
const claimDueSmall = 8

// claimDueLimitSQL is claimDueSQL with LIMIT n in its text, $1 kept in a
// one-time filter (see claimDueSmallSQL).
func claimDueLimitSQL(n int) string {
	return strings.Replace(strings.Replace(claimDueSQL,
		"LIMIT $1 FOR UPDATE OF o SKIP LOCKED", "LIMIT "+strconv.Itoa(n)+" FOR UPDATE OF o SKIP LOCKED", 1),
		"WHERE o.state = 'pending' AND o.job_id IS NULL", "WHERE $1::int4 > 0 AND o.state = 'pending' AND o.job_id IS NULL", 1)
}

// ClaimDueIntents claims up to n due intents of queue without a River job
// of their own in one statement, in the due index's order: intents
// without a run before those of runs, and of each tenant in turn ("" the
// default tenant first), each in due order, its limits not applied (the
// drain claims with ClaimDueShares; this is the claim of tests and
// tools), skipping intents of paused runs, rows other
// drains have locked (SKIP LOCKED), and, when hold is positive, the email
// intents the coalescer may batch until hold has passed since they came
// due (unheldSQL). Each claimed row is set as ClaimIntents sets it (under
// owner's lease, 0: none, which must be held), its next attempt's time
// cleared and one more try counted. The rows are read to the end, and
// closed, before it returns: with a pool, the statement's transaction has
// committed by then.
func ClaimDueIntents(ctx context.Context, db DB, n int, queue string, owner int32, fingerprint string, window, hold time.Duration) ([]ClaimedIntent, error) {
	sql := claimDueSQL
	if n >= 1 && n <= claimDueSmall {
		sql = claimDueSmallSQL[n]
	}
	rows, err := db.Query(ctx, sql, n, window.Seconds(), engineOwner(owner), fingerprint, queue, hold.Seconds())
	if err != nil {
		return nil, err
	}
	var out []ClaimedIntent
	for rows.Next() {
		var c ClaimedIntent
		var left float64
		var tallied string
		if err := scanClaimed(rows, &c.Intent, &c.RateLimited, &c.RunKey, &c.Tries, &left, &c.Tenant, &tallied); err != nil {
			rows.Close()
			return nil, err
		}
		c.WindowLeft = engineSeconds(left)
		out = append(out, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
