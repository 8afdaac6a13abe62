package store

import (
	"context"
	"strconv"
	"time"
)

// The operator's side of tenants (issue 46): `sendonce tenant set`, `show`
// and `reset`, `sendonce tenants`, the outbox page's tenants and the
// per-tenant metrics (cmd/internal/ops/tenants reads them). What a
// tenant's limits leave, and so what holds it back, is tenantLeftSQL's
// (engine_fair.go): the claim's own rule, not a copy of it.

// TenantBacklogCap is where a count of a tenant's backlog stops: a count
// reads at most TenantBacklogCap+1 rows of the due index per tenant and
// class, and a count above TenantBacklogCap means "more than that".
const TenantBacklogCap = 10_000

// TenantChange is what TenantSet changes of a tenant's settings; the rest
// is kept (or, for a tenant without a row, the defaults: weight 1, no
// limits).
type TenantChange struct {
	// Weight, when not nil, is the new weight (1 to 1000).
	Weight *int
	// SetRate says Rate replaces the rate: requests a second, nil for none.
	SetRate bool
	Rate    *float64
	// SetQuotas says QuotaDay and QuotaMonth replace both quotas, nil for
	// none.
	SetQuotas            bool
	QuotaDay, QuotaMonth *int64
}

// tenantSetSQL is TenantSet's statement: one upsert, so that a change is
// written whole or not at all. The bucket and the counts stay as they
// are: tenantLeftSQL caps the tokens at the new rate's second, and the
// counts are the period's whatever the quota.
const tenantSetSQL = `INSERT INTO sendonce_tenant AS t (name, weight, rate, quota_day, quota_month)
		VALUES ($1, coalesce($2::int4, 1), $4::float8, $6::int8, $7::int8)
		ON CONFLICT (name) DO UPDATE SET
			weight = coalesce($2::int4, t.weight),
			rate = CASE WHEN $3::bool THEN $4::float8 ELSE t.rate END,
			quota_day = CASE WHEN $5::bool THEN $6::int8 ELSE t.quota_day END,
			quota_month = CASE WHEN $5::bool THEN $7::int8 ELSE t.quota_month END,
			updated_at = now()`

// TenantSet writes the settings of the tenant name ("" for the default
// tenant) that c changes, creating its row if it has none. The table's
// checks (sendonce_tenant_*_check) refuse what is out of range; the error
// is the statement's, unwrapped.
func TenantSet(ctx context.Context, db DB, name string, c TenantChange) error {
	var rate *float64
	if c.SetRate {
		rate = c.Rate
	}
	var day, month *int64
	if c.SetQuotas {
		day, month = c.QuotaDay, c.QuotaMonth
	}
	_, err := db.Exec(ctx, tenantSetSQL, name, c.Weight, c.SetRate, rate, c.SetQuotas, day, month)
	return err
}

// tenantResetSQL is TenantReset's statement.
const tenantResetSQL = `DELETE FROM sendonce_tenant WHERE name = $1`

// TenantReset deletes the row of the tenant name ("" for the default
// tenant), its settings and its counts: back to weight 1 and no limits.
// It reports whether there was one.
func TenantReset(ctx context.Context, db DB, name string) (bool, error) {
	tag, err := db.Exec(ctx, tenantResetSQL, name)
	return tag.RowsAffected() > 0, err
}

// TenantFigures is a tenant as the operator's surfaces show it: its
// settings, what its limits leave now, its backlog and its paused runs.
type TenantFigures struct {
	Tenant string // "" for the default tenant
	// Configured says the tenant has a row in sendonce_tenant; without one
	// it has weight 1 and no limits.
	Configured bool
	Weight     int
	// Rate is requests a second at most, nil for none; QuotaDay and
	// QuotaMonth are first attempts a UTC day and month at most, nil for
	// none.
	Rate                 *float64
	QuotaDay, QuotaMonth *int64
	UpdatedAt            *time.Time
	// DayUsed and MonthUsed are the first attempts counted in the current
	// UTC day (from Day) and month (from Month). The claim counts them for
	// tenants with a limit only.
	DayUsed, MonthUsed int64
	Day, Month         time.Time
	// Allow is how many intents its limits let a claim take now (the int4
	// maximum without limits); Wait, when Allow is 0, how long until one.
	Allow int
	Wait  time.Duration
	// RateHeld, DayHeld and MonthHeld say which of the limits allows none
	// now (the terms of Allow that are 0): the rate's bucket holds less
	// than a token, the day's or the month's quota is used up.
	RateHeld, DayHeld, MonthHeld bool
	// Backlog is the tenant's pending intents without a River job, the
	// transactional class (no run) first, then the bulk class (of runs),
	// each counted up to TenantBacklogCap+1.
	Backlog [2]int64
	// PausedRuns counts the tenant's paused runs with pending members;
	// PausedRun is the first of them by key.
	PausedRuns int64
	PausedRun  string
}

// capSQL is the most rows a bounded count reads: TenantBacklogCap+1.
var capSQL = strconv.Itoa(TenantBacklogCap + 1)

// tenantBacklogSQL is a LATERAL subquery, bl, whose backlog is the
// tenant n.tenant's pending intents without a River job, of no run and of
// runs (an int8[2]), each counted up to TenantBacklogCap+1: a range of
// sendonce_outbox_tenant_due_idx read in its order, so that the scan
// stops at the cap (a bitmap scan would read the whole range first). The
// class comes from a VALUES list, not a constant: "(run_key IS NOT NULL)
// = false" is folded to "run_key IS NULL", which the index does not
// match.
var tenantBacklogSQL = `LATERAL (SELECT array_agg(b.n ORDER BY c.bulk) AS backlog
			FROM (VALUES (false), (true)) c(bulk) CROSS JOIN LATERAL (SELECT count(*) AS n FROM (SELECT 1 FROM sendonce_outbox o
				WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = c.bulk AND ` + tenantSQL + ` = n.tenant
				ORDER BY ` + dueOrderSQL + ` LIMIT ` + capSQL + `) x) b) bl`

// tenantPausedSQL is a CTE, paused, of the tenants with paused runs that
// have pending members: the tenant, how many such runs, the first by key.
// It reads the paused runs, few, and one probe of
// sendonce_outbox_run_unsettled_idx each.
const tenantPausedSQL = `paused AS MATERIALIZED (
			SELECT coalesce(r.tenant, '') AS tenant, count(*) AS n, min(r.key) AS first FROM sendonce_run r
			WHERE r.state = 'paused' AND EXISTS (SELECT 1 FROM sendonce_outbox o
				WHERE o.run_key = r.key AND o.run_key IS NOT NULL AND o.state = 'pending')
			GROUP BY 1)`

// tenantFiguresSQL reads the figures of the tenants that the CTE names
// (the text of one or more CTEs, the last one named names, with a column
// tenant) yields, in name order.
func tenantFiguresSQL(names string) string {
	return `WITH RECURSIVE ` + names + `, ` + tenantPausedSQL + `
		SELECT n.tenant, t.name IS NOT NULL, coalesce(t.weight, 1), t.rate, t.quota_day, t.quota_month, t.updated_at,
			l.day_used, l.month_used, l.day, l.month, l.allow, l.wait,
			coalesce(floor(l.tokens) <= 0, false), coalesce(t.quota_day - l.day_used <= 0, false),
			coalesce(t.quota_month - l.month_used <= 0, false), bl.backlog, coalesce(p.n, 0), coalesce(p.first, '')
		FROM names n LEFT JOIN sendonce_tenant t ON t.name = n.tenant CROSS JOIN ` + tenantLeftSQL + ` l
			CROSS JOIN ` + tenantBacklogSQL + `
			LEFT JOIN paused p ON p.tenant = n.tenant
		ORDER BY n.tenant`
}

// tenantNoBitmapSQL turns bitmap scans off for the rest of the
// transaction. A count of a tenant's backlog reads the due index in its
// order and stops at TenantBacklogCap+1 rows; a bitmap scan, which the
// planner picks for a range it cannot estimate (a parameter's), reads the
// whole range first, however long, and sorts it.
const tenantNoBitmapSQL = `SET LOCAL enable_bitmapscan = off`

// tenantFigures runs a tenantFiguresSQL statement in the transaction tx,
// bitmap scans off.
func tenantFigures(ctx context.Context, tx DB, sql string, args ...any) ([]TenantFigures, error) {
	if _, err := tx.Exec(ctx, tenantNoBitmapSQL); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TenantFigures
	for rows.Next() {
		var f TenantFigures
		var weight, allow int32
		var wait float64
		var bl []int64
		if err := rows.Scan(&f.Tenant, &f.Configured, &weight, &f.Rate, &f.QuotaDay, &f.QuotaMonth, &f.UpdatedAt,
			&f.DayUsed, &f.MonthUsed, &f.Day, &f.Month, &allow, &wait, &f.RateHeld, &f.DayHeld, &f.MonthHeld,
			&bl, &f.PausedRuns, &f.PausedRun); err != nil {
			return nil, err
		}
		copy(f.Backlog[:], bl)
		f.Weight, f.Allow, f.Wait = int(weight), int(allow), engineSeconds(wait)
		out = append(out, f)
	}
	return out, rows.Err()
}

// tenantsSQL is TenantsRead's statement. Its names are those of two walks
// over sendonce_outbox_tenant_due_idx, one per class, from one tenant to
// the next (a probe each), and of the rows of sendonce_tenant, from $1 on,
// $3+2 of each at most ($1 and the $3+1 after it); $1 itself is in when
// $2 says so (the first page, from the default tenant, the empty name),
// and $3+1 names at most.
var tenantsSQL = tenantFiguresSQL(`walk AS (
			SELECT c.bulk, f.tenant, 1 AS depth FROM (VALUES (false), (true)) c(bulk) CROSS JOIN LATERAL (
				SELECT ` + tenantSQL + ` AS tenant FROM sendonce_outbox o
				WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = c.bulk AND ` + tenantSQL + ` >= $1
				ORDER BY (o.run_key IS NOT NULL), ` + tenantSQL + ` LIMIT 1) f
			UNION ALL
			SELECT w.bulk, f.tenant, w.depth + 1 FROM walk w CROSS JOIN LATERAL (
				SELECT ` + tenantSQL + ` AS tenant FROM sendonce_outbox o
				WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = w.bulk AND ` + tenantSQL + ` > w.tenant
				ORDER BY (o.run_key IS NOT NULL), ` + tenantSQL + ` LIMIT 1) f
			WHERE w.depth <= $3::int4 + 1),
		names AS (
			SELECT u.tenant FROM (
				SELECT walk.tenant FROM walk
				UNION
				SELECT s.name FROM (SELECT name FROM sendonce_tenant WHERE name >= $1 ORDER BY name LIMIT $3::int4 + 2) s) u
			WHERE u.tenant > $1 OR ($2::bool AND u.tenant = $1)
			ORDER BY u.tenant LIMIT $3::int4 + 1)`)

// TenantsRead reads the figures of the tenants with intents pending
// without a River job or with a row in sendonce_tenant, in name order
// (the default tenant, "", first): from after on (after itself too when
// from is set), limit+1 of them at most, so that the caller knows whether
// more follow. Its cost grows with limit, not with the intents: a probe
// or two per tenant and class, and its backlog's count, bounded. tx is a
// transaction (planguard.Run's), whose bitmap scans it turns off.
func TenantsRead(ctx context.Context, tx DB, after string, from bool, limit int) ([]TenantFigures, error) {
	return tenantFigures(ctx, tx, tenantsSQL, after, from, limit)
}

// tenantOneSQL is TenantRead's statement.
var tenantOneSQL = tenantFiguresSQL(`names AS (SELECT $1::text AS tenant)`)

// TenantRead reads the figures of the tenant name ("" for the default
// tenant), whether it has intents or settings or not. tx is a transaction,
// as TenantsRead's.
func TenantRead(ctx context.Context, tx DB, name string) (TenantFigures, error) {
	out, err := tenantFigures(ctx, tx, tenantOneSQL, name)
	if err != nil || len(out) == 0 {
		return TenantFigures{}, err
	}
	return out[0], nil
}

// tenantsInUseSQL is TenantsInUse's statement: a row of sendonce_tenant,
// or a probe per class of sendonce_outbox_tenant_due_idx for a tenant
// after the default one.
const tenantsInUseSQL = `SELECT EXISTS (SELECT 1 FROM sendonce_tenant)
		OR EXISTS (SELECT 1 FROM (VALUES (false), (true)) c(bulk) CROSS JOIN LATERAL (
			SELECT 1 FROM sendonce_outbox o
			WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = c.bulk AND ` + tenantSQL + ` > ''
			ORDER BY (o.run_key IS NOT NULL), ` + tenantSQL + ` LIMIT 1) f)`

// TenantsInUse reports whether an operator has more than the default
// tenant to look at: a tenant with settings, or another tenant's intents
// pending without a River job. Two or three probes.
func TenantsInUse(ctx context.Context, db DB) (bool, error) {
	var used bool
	err := db.QueryRow(ctx, tenantsInUseSQL).Scan(&used)
	return used, err
}

// TenantClaims is what the live workers claimed in the last minute, by
// tenant, as their rows of sendonce_worker say (tenants, written with each
// lease's renewal).
type TenantClaims struct {
	// ByTenant is intents claimed by tenant: "" the default tenant, "*"
	// those of the tenants beyond each worker's 100 with the most.
	ByTenant map[string]int64
	// Total is the sum of ByTenant.
	Total int64
	// Live counts the live workers (ended_at NULL); Reporting those of
	// them whose row says what they claimed (not NULL).
	Live, Reporting int
}

// tenantClaimsSQL is TenantClaimsRead's statement: the live workers' maps
// summed by tenant, and a row with no tenant (NULL) for the live workers
// and those that say. Anything in a map but numbers is passed over.
const tenantClaimsSQL = `SELECT e.key, sum(e.value::numeric)::int8, 0 FROM sendonce_worker w
			CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(w.tenants) = 'object' THEN w.tenants ELSE '{}'::jsonb END) e
		WHERE w.ended_at IS NULL AND jsonb_typeof(e.value) = 'number'
		GROUP BY e.key
		UNION ALL
		SELECT NULL, count(*), count(*) FILTER (WHERE w.tenants IS NOT NULL) FROM sendonce_worker w WHERE w.ended_at IS NULL`

// TenantClaimsRead sums what the live workers claimed in the last minute,
// by tenant. A worker whose row has no map yet (NULL: a release before
// workers wrote it) adds nothing, and is not counted in Reporting.
func TenantClaimsRead(ctx context.Context, db DB) (TenantClaims, error) {
	c := TenantClaims{ByTenant: map[string]int64{}}
	rows, err := db.Query(ctx, tenantClaimsSQL)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var key *string
		var n, reporting int64
		if err := rows.Scan(&key, &n, &reporting); err != nil {
			return c, err
		}
		if key == nil {
			c.Live, c.Reporting = int(n), int(reporting)
			continue
		}
		c.ByTenant[*key] += n
		c.Total += n
	}
	return c, rows.Err()
}

// tenantNamedSQL is the CTE named of the tenants the metrics name: the
// default tenant, and the first $1 other tenants with a row of
// sendonce_tenant, by name.
const tenantNamedSQL = `named AS MATERIALIZED (
			SELECT '' AS tenant
			UNION ALL
			SELECT s.name FROM (SELECT name FROM sendonce_tenant WHERE name > '' ORDER BY name LIMIT $1::int4) s)`

// tenantsNamedSQL is TenantsNamedRead's statement.
var tenantsNamedSQL = tenantFiguresSQL(tenantNamedSQL + `, names AS (SELECT tenant FROM named)`)

// TenantsNamedRead reads the figures of the default tenant and of the
// first limit other tenants with a row in sendonce_tenant, by name: the
// tenants that /metrics names. tx is a transaction, as TenantsRead's.
func TenantsNamedRead(ctx context.Context, tx DB, limit int) ([]TenantFigures, error) {
	return tenantFigures(ctx, tx, tenantsNamedSQL, limit)
}

// TenantsOther is what the tenants that TenantsNamedRead leaves out add
// up to.
type TenantsOther struct {
	// Backlog is their pending intents without a River job, by class as
	// TenantFigures.Backlog, counted up to TenantBacklogCap+1 in all.
	Backlog [2]int64
	// RateHeld, DayHeld and MonthHeld count those of them with intents
	// pending that a limit holds back (as TenantFigures' fields); Paused
	// those with a paused run that has pending members.
	RateHeld, DayHeld, MonthHeld, Paused int64
}

// tenantOtherBacklogSQL counts, up to TenantBacklogCap+1, the pending
// intents without a River job of class c.bulk of the tenants between
// those of named: a range of sendonce_outbox_tenant_due_idx per gap
// between two named tenants, and one after the last, so that no named
// tenant's intents are read. The last range ends at the class's last
// tenant (a probe), so that the planner, which cannot know the bounds,
// takes it for as narrow as the others, and reads it in the index's order
// rather than whole and sorted.
var tenantOtherBacklogSQL = `(SELECT count(*) FROM (
				SELECT 1 FROM gaps g CROSS JOIN LATERAL (
					SELECT 1 FROM sendonce_outbox o
					WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = c.bulk
						AND ` + tenantSQL + ` > g.lo AND ` + tenantSQL + ` < g.hi
					ORDER BY ` + dueOrderSQL + ` LIMIT ` + capSQL + `) x
				WHERE g.hi IS NOT NULL
				UNION ALL
				SELECT 1 FROM (SELECT 1 FROM sendonce_outbox o
					WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = c.bulk
						AND ` + tenantSQL + ` > (SELECT max(g.lo) FROM gaps g)
						AND ` + tenantSQL + ` <= (SELECT ` + tenantSQL + ` FROM sendonce_outbox o
							WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) = c.bulk
							ORDER BY (o.run_key IS NOT NULL) DESC, ` + tenantSQL + ` DESC LIMIT 1)
					ORDER BY ` + dueOrderSQL + ` LIMIT ` + capSQL + `) y
				LIMIT ` + capSQL + `) z)`

// tenantsOtherSQL is TenantsOtherRead's statement: the other tenants'
// backlog by class (two rows, bulk false then true), then a row (bulk
// NULL) of how many of them are held, by reason. The configured ones
// beyond the named are few (rows of sendonce_tenant); a probe each says
// whether one has intents pending.
var tenantsOtherSQL = `WITH ` + tenantNamedSQL + `,
		gaps AS MATERIALIZED (SELECT tenant AS lo, lead(tenant) OVER (ORDER BY tenant) AS hi FROM named),
		` + tenantPausedSQL + `,
		held AS (
			SELECT coalesce(floor(l.tokens) <= 0, false) AS rate, coalesce(t.quota_day - l.day_used <= 0, false) AS day,
				coalesce(t.quota_month - l.month_used <= 0, false) AS month
			FROM sendonce_tenant t CROSS JOIN ` + tenantLeftSQL + ` l
			WHERE t.name NOT IN (SELECT tenant FROM named) AND l.allow = 0
				AND EXISTS (SELECT 1 FROM sendonce_outbox o
					WHERE o.state = 'pending' AND o.job_id IS NULL AND (o.run_key IS NOT NULL) IN (false, true)
						AND ` + tenantSQL + ` = t.name))
		SELECT c.bulk, ` + tenantOtherBacklogSQL + `, 0, 0, 0, 0 FROM (VALUES (false), (true)) c(bulk)
		UNION ALL
		SELECT NULL, 0, (SELECT count(*) FILTER (WHERE rate) FROM held), (SELECT count(*) FILTER (WHERE day) FROM held),
			(SELECT count(*) FILTER (WHERE month) FROM held),
			(SELECT count(*) FROM paused p WHERE p.tenant NOT IN (SELECT tenant FROM named))`

// TenantsOtherRead adds up the tenants that TenantsNamedRead(limit) leaves
// out: their backlog, bounded, and how many are held back. Its cost grows
// with the named tenants and the configured ones, not with the intents.
// tx is a transaction, as TenantsRead's.
func TenantsOtherRead(ctx context.Context, tx DB, limit int) (TenantsOther, error) {
	var o TenantsOther
	if _, err := tx.Exec(ctx, tenantNoBitmapSQL); err != nil {
		return o, err
	}
	rows, err := tx.Query(ctx, tenantsOtherSQL, limit)
	if err != nil {
		return o, err
	}
	defer rows.Close()
	for rows.Next() {
		var bulk *bool
		var n, rate, day, month, paused int64
		if err := rows.Scan(&bulk, &n, &rate, &day, &month, &paused); err != nil {
			return o, err
		}
		switch {
		case bulk == nil:
			o.RateHeld, o.DayHeld, o.MonthHeld, o.Paused = rate, day, month, paused
		case *bulk:
			o.Backlog[1] = n
		default:
			o.Backlog[0] = n
		}
	}
	return o, rows.Err()
}
