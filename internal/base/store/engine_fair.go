package store

import (
	"context"
	"math"
	"strconv"
	"time"
)

// The drain's fair claim (internal/engine/sendstate's ClaimShares and
// DueTenants): due intents taken tenant by tenant, as many of each
// tenant's as the drain's scheduler gives it, within the tenant's own
// limits (sendonce_tenant, migration 00031), and the look at which
// tenants have intents due.

// Share is how many due intents of one tenant of one class a fair claim
// asks for.
type Share struct {
	Bulk   bool   // intents of runs; false: intents without a run
	Tenant string // "" for the default tenant
	N      int
}

// tenantLeftSQL is a LATERAL subquery over the sendonce_tenant row
// aliased t (all NULL when the tenant has none) that says what its limits
// leave now: tokens (its rate's bucket refilled to now, a second's worth
// at most and at least one token; NULL without a rate), day and month
// (the UTC calendar periods now is in), day_used and month_used (first
// attempts counted in them), allow (intents a claim may take now; the
// int4 maximum without limits) and wait (seconds until allow is 1 or
// more, 0 when it is).
const tenantLeftSQL = `LATERAL (SELECT l.tokens, l.day, l.month, l.day_used, l.month_used,
		greatest(0, least(coalesce(floor(l.tokens), 2147483647), coalesce(t.quota_day - l.day_used, 2147483647),
			coalesce(t.quota_month - l.month_used, 2147483647)))::int4 AS allow,
		greatest(CASE WHEN l.tokens < 1 THEN (1 - l.tokens) / t.rate ELSE 0 END,
			CASE WHEN t.quota_day - l.day_used <= 0
				THEN extract(epoch FROM ((l.day AT TIME ZONE 'UTC') + interval '1 day') AT TIME ZONE 'UTC' - now()) ELSE 0 END,
			CASE WHEN t.quota_month - l.month_used <= 0
				THEN extract(epoch FROM ((l.month AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC' - now()) ELSE 0 END)::float8 AS wait
	FROM (SELECT
		CASE WHEN t.rate IS NULL THEN NULL
			WHEN t.refilled_at IS NULL THEN greatest(t.rate, 1)
			ELSE least(greatest(t.rate, 1), t.tokens + t.rate * extract(epoch FROM now() - t.refilled_at)::float8) END AS tokens,
		date_trunc('day', now(), 'UTC') AS day, date_trunc('month', now(), 'UTC') AS month,
		CASE WHEN t.day_start = date_trunc('day', now(), 'UTC') THEN t.day_count ELSE 0 END AS day_used,
		CASE WHEN t.month_start = date_trunc('month', now(), 'UTC') THEN t.month_count ELSE 0 END AS month_used) l)`

// limitedSQL is the SQL condition that the sendonce_tenant row aliased t
// sets a limit.
const limitedSQL = `(t.rate IS NOT NULL OR t.quota_day IS NOT NULL OR t.quota_month IS NOT NULL)`

// claimSharesSQL is ClaimDueShares' statement for up to k shares: $6, $7
// and $8 are the shares' classes, tenants and counts, padded to k (a
// count of 0 takes nothing); $1, the shares' number, is only checked; $2
// to $5 are those of claimDueSQL; with owned, the claim is fenced by the
// owner's lease ($3); with hold, $9 is the coalescing hold. The shares are
// read by index from generate_series(1, k), whose row count the planner
// knows, so that the generic plan costs what a custom one would and is
// kept (an unnest of a parameter is estimated at many rows, and its
// statement planned anew at every call; see claimOneSQL). For the same
// reason no outbox row is read through a condition that a parameter's
// value could make true (the fence without an owner, the hold of 0): a
// plan for the arguments would fold it away, cost less than the generic
// one, and be chosen, and planned, at every call (a millisecond each with
// a thousand tenants, when the statistics were of one large tenant's).
//
// The limited tenants among the shares are locked, in name order, so
// that two claims of one tenant take its tokens one after the other;
// each share takes no more than its tenant's limits allow, and the
// tenant's row counts what was taken: every claim spends a token, and a
// first attempt counts against the quotas.
func claimSharesSQL(k int, owned, hold bool) string {
	ks := strconv.Itoa(k)
	fence, unheld := "", ""
	if owned {
		fence = ` AND ` + held("$3::int4")
	}
	if hold {
		unheld = ` AND ` + unheldSQL("$9::float8")
	}
	return `WITH locked AS MATERIALIZED (
			SELECT t.* FROM sendonce_tenant t
			WHERE t.name IN (SELECT ($7::text[])[j] FROM generate_series(1, ` + ks + `) AS j) AND ` + limitedSQL + `
			ORDER BY t.name FOR UPDATE OF t),
		lim AS (SELECT t.name, l.* FROM locked t CROSS JOIN ` + tenantLeftSQL + ` l),
		due AS (
			SELECT d.id AS due_id FROM generate_series(1, ` + ks + `) AS i
				LEFT JOIN lim ON lim.name = ($7::text[])[i] AND $1::int4 > 0
				CROSS JOIN LATERAL (
					SELECT o.id FROM sendonce_outbox o
					WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = ($6::bool[])[i]
						AND ` + tenantSQL + ` = ($7::text[])[i] AND ` + dueSQL + ` <= now() AND o.queue = $5
						AND ` + notPausedSQL + `
						` + fence + unheld + `
					ORDER BY ` + dueOrderSQL + `
					LIMIT greatest(0, least(coalesce(($8::int4[])[i], 0), coalesce(lim.allow, 2147483647)))
					FOR UPDATE OF o SKIP LOCKED) d),
		claimed AS (
			UPDATE sendonce_outbox o
			SET ` + claimSet("o", "o.state") + `,
				` + claimSuppressedSet + `
				next_attempt_at = NULL, tries = o.tries + 1, updated_at = now()
			FROM due WHERE o.id = due.due_id
			RETURNING ` + claimColumns + `, o.rate_limited, coalesce(o.run_key, ''), o.tries,
				extract(epoch FROM o.first_attempt_at + $2::float8 * interval '1 second' - now())::float8,
				` + tenantSQL + ` AS claimed_tenant, ` + selfTallied + `, o.attempts = 1 AS first_claim),
		spent AS (
			UPDATE sendonce_tenant t
			SET tokens = CASE WHEN lim.tokens IS NULL THEN t.tokens ELSE greatest(lim.tokens - c.n, 0) END,
				refilled_at = CASE WHEN lim.tokens IS NULL THEN t.refilled_at ELSE now() END,
				day_start = lim.day, day_count = lim.day_used + c.first,
				month_start = lim.month, month_count = lim.month_used + c.first
			FROM lim JOIN (SELECT claimed_tenant, count(*) AS n, count(*) FILTER (WHERE first_claim) AS first
				FROM claimed GROUP BY claimed_tenant) c ON c.claimed_tenant = lim.name
			WHERE t.name = lim.name)
		SELECT * FROM claimed`
}

// shareSizes are the share counts with a statement text of their own
// (claimSharesSQL): a claim's shares are padded to the next (a share of
// none costs next to nothing: its LIMIT 0 reads no row). Each text is
// planned for its arguments at its first five runs on a connection, a few
// milliseconds each at these sizes, so there are few of them.
var shareSizes = []int{1, 8, 32, MaxShares}

// MaxShares is the most shares one fair claim takes.
const MaxShares = 128

// claimSharesTexts are claimSharesSQL's texts, by size, owned and hold.
var claimSharesTexts = func() map[claimSharesText]string {
	out := map[claimSharesText]string{}
	for _, k := range shareSizes {
		for _, owned := range []bool{false, true} {
			for _, hold := range []bool{false, true} {
				out[claimSharesText{k, owned, hold}] = claimSharesSQL(k, owned, hold)
			}
		}
	}
	return out
}()

type claimSharesText struct {
	k           int
	owned, hold bool
}

// ClaimDueShares claims, in one statement, up to each share's N due
// intents of its tenant and class, of queue, without a River job of their
// own, in due order; as ClaimDueIntents does otherwise (paused runs,
// SKIP LOCKED, hold, owner, window). A share of a tenant with limits
// (sendonce_tenant) takes no more than they allow now, and spends them.
// At most MaxShares shares; the rows are read to the end, and closed,
// before it returns.
func ClaimDueShares(ctx context.Context, db DB, shares []Share, queue string, owner int32, fingerprint string, window, hold time.Duration) ([]ClaimedIntent, error) {
	if len(shares) == 0 {
		return nil, nil
	}
	shares = shares[:min(len(shares), MaxShares)]
	k := shareSizes[len(shareSizes)-1]
	for _, s := range shareSizes {
		if s >= len(shares) {
			k = s
			break
		}
	}
	bulk, tenants, counts := make([]bool, k), make([]string, k), make([]int32, k)
	for i, s := range shares {
		bulk[i], tenants[i], counts[i] = s.Bulk, s.Tenant, int32(min(max(s.N, 0), math.MaxInt32))
	}
	args := []any{len(shares), window.Seconds(), engineOwner(owner), fingerprint, queue, bulk, tenants, counts}
	if hold > 0 {
		args = append(args, hold.Seconds())
	}
	rows, err := db.Query(ctx, claimSharesTexts[claimSharesText{k, owner != 0, hold > 0}], args...)
	if err != nil {
		return nil, err
	}
	var out []ClaimedIntent
	for rows.Next() {
		var c ClaimedIntent
		var left float64
		var tallied string
		var first bool
		if err := scanClaimed(rows, &c.Intent, &c.RateLimited, &c.RunKey, &c.Tries, &left, &c.Tenant, &tallied, &first); err != nil {
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

// DueTenant is a tenant with intents of one class pending for a drain,
// as DueTenants finds it.
type DueTenant struct {
	Bulk   bool
	Tenant string
	// Due says a claim would find one of them due now (its limits aside).
	Due bool
	// Next, when none is due, is how long until the first comes due (nil:
	// none has a due time ahead); with DueTenants' next, it may be sooner,
	// when the tenant's first pending intent is of another queue or of a
	// paused run.
	Next *time.Duration
	// Weight is the tenant's weight (1 without settings).
	Weight int
	// Allow is how many intents its limits let a claim take now (the int4
	// maximum without limits); Wait, when Allow is 0, how long until one.
	Allow int
	Wait  time.Duration
}

// dueTenantsSQL is DueTenants' statement: a walk over the due index from
// one (class, tenant) to the next, one probe each, which finds each
// tenant's first due time on the way, and the tenant's settings and what
// its limits leave. With next (the drain's look before it sleeps), a
// tenant whose first due time has come is probed for a due intent that a
// claim would take (of the queue, not of a paused run, not held for
// coalescing with hold, $2), and only one that has none for the next to
// come due; a tenant whose first due time is ahead comes due then (or a
// look then finds it is of another queue or a paused run). Without next
// (a claim's look), a tenant is due when its first due time has come, and
// a claim that finds otherwise comes back short. A text has no parameter
// it does not use, so that no custom plan folds one away and the generic
// plan is kept.
func dueTenantsSQL(hold, next bool) string {
	due := `ts.at <= now()`
	nextDue := `NULL::float8`
	if next {
		unheld := ""
		if hold {
			unheld = ` AND ` + unheldSQL("$2::float8")
		}
		due = `CASE WHEN ts.at <= now() THEN EXISTS (SELECT 1 FROM sendonce_outbox o
				WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = ts.bulk
					AND ` + tenantSQL + ` = ts.tenant AND ` + dueSQL + ` <= now() AND o.queue = $1
					AND ` + notPausedSQL + unheld + `) ELSE false END`
		nextDue = `CASE WHEN ts.at > now() THEN extract(epoch FROM ts.at - now())::float8
			WHEN ts.due THEN NULL::float8
			ELSE (SELECT extract(epoch FROM ` + dueSQL + ` - now())::float8 FROM sendonce_outbox o
				WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = ts.bulk
					AND ` + tenantSQL + ` = ts.tenant AND ` + dueSQL + ` > now() AND o.queue = $1 AND ` + notPausedSQL + `
				ORDER BY ` + dueOrderSQL + ` LIMIT 1) END`
	}
	return `WITH RECURSIVE ts AS (
			(SELECT (o.run_key IS NOT NULL) AS bulk, ` + tenantSQL + ` AS tenant, ` + dueSQL + ` AS at FROM sendonce_outbox o
				WHERE o.state = 'pending' AND o.job_id IS NULL
				ORDER BY ` + dueOrderSQL + ` LIMIT 1)
			UNION ALL
			SELECT n.bulk, n.tenant, n.at FROM ts CROSS JOIN LATERAL (
				SELECT (o.run_key IS NOT NULL) AS bulk, ` + tenantSQL + ` AS tenant, ` + dueSQL + ` AS at FROM sendonce_outbox o
				WHERE o.state = 'pending' AND o.job_id IS NULL
					AND ((o.run_key IS NOT NULL), ` + tenantSQL + `) > (ts.bulk, ts.tenant)
				ORDER BY ` + dueOrderSQL + ` LIMIT 1) n),
		td AS MATERIALIZED (SELECT ts.bulk, ts.tenant, ts.at, ` + due + ` AS due FROM ts)
		SELECT ts.bulk, ts.tenant, ts.due, ` + nextDue + `,
			coalesce(t.weight, 1), l.allow, l.wait
		FROM td ts LEFT JOIN sendonce_tenant t ON t.name = ts.tenant CROSS JOIN ` + tenantLeftSQL + ` l
		ORDER BY ts.bulk, ts.tenant`
}

// dueTenantsTexts are dueTenantsSQL's texts, by [hold][next].
var dueTenantsTexts = [2][2]string{
	{dueTenantsSQL(false, false), dueTenantsSQL(false, true)},
	{dueTenantsSQL(true, false), dueTenantsSQL(true, true)},
}

// DueTenants lists the tenants with intents pending without a River job
// (a drain's), one entry per tenant and class: whether one is due now,
// the tenant's weight, and what its limits leave. With next, due means
// one of queue, not of a paused run and not held for coalescing by hold,
// and Next says, when none is, how long until the next comes due;
// without, a tenant is due once its first intent's due time has come
// (of any queue, of a paused run or held: the claim is the judge).
// Transactional classes come first, tenants in name order. One
// statement: its cost grows with the tenants that have intents pending
// (one probe each, with next a second for each tenant whose first due time
// has come, and a third where that finds none due), not with the intents.
func DueTenants(ctx context.Context, db DB, queue string, hold time.Duration, next bool) ([]DueTenant, error) {
	h, nx := 0, 0
	var args []any
	if next {
		nx = 1
		args = append(args, queue)
		if hold > 0 {
			h = 1
			args = append(args, hold.Seconds())
		}
	}
	rows, err := db.Query(ctx, dueTenantsTexts[h][nx], args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DueTenant
	for rows.Next() {
		var d DueTenant
		var next *float64
		var allow int32
		var wait float64
		if err := rows.Scan(&d.Bulk, &d.Tenant, &d.Due, &next, &d.Weight, &allow, &wait); err != nil {
			return nil, err
		}
		if next != nil {
			in := engineSeconds(*next)
			d.Next = &in
		}
		d.Allow, d.Wait = int(allow), engineSeconds(wait)
		out = append(out, d)
	}
	return out, rows.Err()
}
