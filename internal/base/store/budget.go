package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of package budget (internal/base/budget): an API key's
// rate budget (sendonce_rate_budget, store.go there) and its quotas'
// counts (sendonce_rate_quota, quota.go there). Times are the database's
// clock; durations travel as seconds (float8).

// RateBudget is an API key's row of sendonce_rate_budget as of T, the
// read's clock_timestamp(), its times measured from T in seconds.
type RateBudget struct {
	// Version is the row's xmin: a write goes in only while it is the same.
	Version string
	T       time.Time
	// Ceiling and Rate are 0 when NULL.
	Ceiling, Rate, Tokens float64
	// SinceRefill, SinceCut, SinceCeiling and SinceRecent are the seconds
	// since refilled_at, decreased_at, ceiling_seen_at and recent_at (the
	// last at most 3600); PausedFor and ProbeFor those until paused_until
	// and probe_until. None is below 0.
	SinceRefill, PausedFor, ProbeFor, SinceCut, SinceCeiling float64
	Throttles                                                int64
	Requests, Refusals                                       float64
	SinceRecent                                              float64
}

// budgetReadSQL reads key $1's budget row with its version, as of
// clock_timestamp().
const budgetReadSQL = `SELECT xmin::text, t, coalesce(ceiling, 0), coalesce(rate, 0), tokens,
				greatest(0, extract(epoch FROM t - refilled_at))::float8,
				greatest(0, extract(epoch FROM paused_until - t))::float8,
				greatest(0, extract(epoch FROM probe_until - t))::float8,
				greatest(0, extract(epoch FROM t - decreased_at))::float8,
				greatest(0, extract(epoch FROM t - ceiling_seen_at))::float8,
				throttles, recent_requests, recent_refusals,
				least(3600, greatest(0, extract(epoch FROM t - recent_at)))::float8
			FROM sendonce_rate_budget, clock_timestamp() AS t WHERE key_fingerprint = $1`

// ReadRateBudget reads the budget row of the API key with fingerprint fp
// (budgetReadSQL). Its error is pgx.ErrNoRows when there is none yet, the
// database's otherwise, unwrapped.
func ReadRateBudget(ctx context.Context, db DB, fp string) (RateBudget, error) {
	var b RateBudget
	err := db.QueryRow(ctx, budgetReadSQL, fp).
		Scan(&b.Version, &b.T, &b.Ceiling, &b.Rate, &b.Tokens, &b.SinceRefill, &b.PausedFor, &b.ProbeFor, &b.SinceCut, &b.SinceCeiling,
			&b.Throttles, &b.Requests, &b.Refusals, &b.SinceRecent)
	return b, err
}

// budgetMakeSQL makes key $1's budget row, unless a worker made it first.
const budgetMakeSQL = `INSERT INTO sendonce_rate_budget (key_fingerprint) VALUES ($1) ON CONFLICT DO NOTHING`

// MakeRateBudget makes the budget row of the API key with fingerprint fp,
// unless it is there. The error is the database's, unwrapped.
func MakeRateBudget(ctx context.Context, db DB, fp string) error {
	_, err := db.Exec(ctx, budgetMakeSQL, fp)
	return err
}

// budgetWriteSQL writes key $1's budget row as of $2 (the read's clock),
// only if its version is still $15.
const budgetWriteSQL = `UPDATE sendonce_rate_budget SET ceiling = nullif($3::float8, 0), rate = nullif($4::float8, 0), tokens = $5,
			refilled_at = $2::timestamptz - $6 * interval '1 second',
			paused_until = $2::timestamptz + $7 * interval '1 second',
			probe_until = CASE WHEN $8::float8 > 0 THEN $2::timestamptz + $8::float8 * interval '1 second' ELSE 'epoch' END,
			ceiling_seen_at = $2::timestamptz - $9 * interval '1 second',
			decreased_at = CASE WHEN $10 THEN $2::timestamptz ELSE decreased_at END,
			throttles = $11, recent_requests = $12, recent_refusals = $13,
			recent_at = $2::timestamptz - $14 * interval '1 second'
		WHERE key_fingerprint = $1 AND xmin::text = $15`

// WriteRateBudget writes b back to the budget row of the API key with
// fingerprint fp as of b.T (the read's instant: b's durations are measured
// from it; SinceCut is not written, cut sets decreased_at to b.T), only if
// the row's version is still b.Version. It returns whether it wrote (false:
// another worker wrote the row since it was read). The error is the
// database's, unwrapped.
func WriteRateBudget(ctx context.Context, db DB, fp string, b *RateBudget, cut bool) (bool, error) {
	tag, err := db.Exec(ctx, budgetWriteSQL,
		fp, b.T, b.Ceiling, b.Rate, b.Tokens, b.SinceRefill, b.PausedFor, b.ProbeFor,
		b.SinceCeiling, cut, b.Throttles, b.Requests, b.Refusals, b.SinceRecent, b.Version)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// budgetEndProbeSQL ends key $1's probing, unless a pause begun since
// keeps it.
const budgetEndProbeSQL = `UPDATE sendonce_rate_budget SET probe_until = 'epoch'
		WHERE key_fingerprint = $1 AND probe_until > clock_timestamp() AND paused_until <= clock_timestamp()`

// EndRateProbe ends the fleet's probing of the API key with fingerprint
// fp: the API served a request. A pause begun since (a later probe met
// another long Retry-After) keeps its probing. The error is the
// database's, unwrapped.
func EndRateProbe(ctx context.Context, db DB, fp string) error {
	_, err := db.Exec(ctx, budgetEndProbeSQL, fp)
	return err
}

// RateBudgetStatus is an API key's budget as ReadRateBudgets reads it.
type RateBudgetStatus struct {
	Fingerprint   string
	Ceiling, Rate float64
	// PausedFor and ProbingFor are seconds from now: until the pause's end,
	// and from it (or now) until the probing's end.
	PausedFor, ProbingFor float64
	Throttles             int64
}

// budgetStatusSQL reads every key's budget, by fingerprint.
const budgetStatusSQL = `SELECT key_fingerprint, coalesce(ceiling, 0), coalesce(rate, 0),
			greatest(0, extract(epoch FROM paused_until - t))::float8,
			greatest(0, extract(epoch FROM probe_until - greatest(t, paused_until)))::float8, throttles
		FROM sendonce_rate_budget, clock_timestamp() AS t ORDER BY key_fingerprint`

// ReadRateBudgets returns the budget of every API key that has one, by
// fingerprint. The error is the database's, unwrapped.
func ReadRateBudgets(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]RateBudgetStatus, error) {
	rows, err := db.Query(ctx, budgetStatusSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RateBudgetStatus, error) {
		var st RateBudgetStatus
		err := r.Scan(&st.Fingerprint, &st.Ceiling, &st.Rate, &st.PausedFor, &st.ProbingFor, &st.Throttles)
		return st, err
	})
}

// budgetClockSQL reads the database's clock.
const budgetClockSQL = `SELECT clock_timestamp()`

// QuotaClock reads the database's clock (clock_timestamp()), the one the
// quotas' periods are counted by.
func QuotaClock(ctx context.Context, db DB) (time.Time, error) {
	var t time.Time
	err := db.QueryRow(ctx, budgetClockSQL).Scan(&t)
	return t, err
}

// QuotaRow is a row of sendonce_rate_quota: one API key's count over one
// period. Quota is nil when not known.
type QuotaRow struct {
	Period                 string
	Quota                  *int64
	Start, Resets          time.Time
	Used                   int64
	ExhaustedUntil         time.Time
	ExhaustedBy            string
	ProbeAt, CountOffUntil time.Time
}

// budgetLockQuotasSQL locks and reads key $1's quota rows, by period.
const budgetLockQuotasSQL = `SELECT period, quota, period_start, resets_at, used, exhausted_until, exhausted_by, probe_at, count_off_until
			FROM sendonce_rate_quota WHERE key_fingerprint = $1 ORDER BY period FOR UPDATE`

// LockQuotaRows locks (FOR UPDATE) and reads the quota rows of the API key
// with fingerprint fp, by period. The error is the database's, unwrapped.
func LockQuotaRows(ctx context.Context, db DB, fp string) ([]QuotaRow, error) {
	rows, err := db.Query(ctx, budgetLockQuotasSQL, fp)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (QuotaRow, error) {
		var x QuotaRow
		err := r.Scan(&x.Period, &x.Quota, &x.Start, &x.Resets, &x.Used, &x.ExhaustedUntil, &x.ExhaustedBy, &x.ProbeAt, &x.CountOffUntil)
		return x, err
	})
}

// budgetMakeQuotaSQL makes key $1's quota row of period $2 ($3 to $4),
// unless it is there.
const budgetMakeQuotaSQL = `INSERT INTO sendonce_rate_quota (key_fingerprint, period, period_start, resets_at)
				VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`

// MakeQuotaRow makes the quota row of the API key with fingerprint fp for
// period, from start until resets, unless it is there. The error is the
// database's, unwrapped.
func MakeQuotaRow(ctx context.Context, db DB, fp, period string, start, resets time.Time) error {
	_, err := db.Exec(ctx, budgetMakeQuotaSQL, fp, period, start, resets)
	return err
}

// budgetWriteQuotaSQL writes key $1's quota row of period $2 back.
const budgetWriteQuotaSQL = `UPDATE sendonce_rate_quota SET quota = $3, period_start = $4, resets_at = $5, used = $6,
				exhausted_until = $7, exhausted_by = $8, probe_at = $9, count_off_until = $10
			WHERE key_fingerprint = $1 AND period = $2`

// WriteQuotaRow writes r back to the quota row of the API key with
// fingerprint fp for r.Period (every other field of r; the times as they
// are, so a zero time is the caller's to turn into 'epoch'). The error is
// the database's, unwrapped.
func WriteQuotaRow(ctx context.Context, db DB, fp string, r *QuotaRow) error {
	_, err := db.Exec(ctx, budgetWriteQuotaSQL,
		fp, r.Period, r.Quota, r.Start, r.Resets, r.Used, r.ExhaustedUntil, r.ExhaustedBy, r.ProbeAt, r.CountOffUntil)
	return err
}

// budgetQuotaExhaustedSQL records the API's answer that key $1's quota of
// period $2 is used up until $6, with a probe at $7.
const budgetQuotaExhaustedSQL = `INSERT INTO sendonce_rate_quota AS q (key_fingerprint, period, quota, period_start, resets_at,
				exhausted_until, exhausted_by, probe_at)
			VALUES ($1, $2, $3, $4, $5, $6, 'api', $7)
			ON CONFLICT (key_fingerprint, period) DO UPDATE SET quota = coalesce(excluded.quota, q.quota),
				exhausted_until = excluded.exhausted_until, exhausted_by = 'api', probe_at = excluded.probe_at,
				count_off_until = 'epoch'`

// QuotaExhaustedByAPI records the API's answer that the quota of period
// (quota, nil when not known: the row's stays) of the API key with
// fingerprint fp is used up until until, with the fleet's probe at
// probeAt; a row made now counts from start until resets. The error is the
// database's, unwrapped.
func QuotaExhaustedByAPI(ctx context.Context, db DB, fp, period string, quota *int64, start, resets, until, probeAt time.Time) error {
	_, err := db.Exec(ctx, budgetQuotaExhaustedSQL, fp, period, quota, start, resets, until, probeAt)
	return err
}

// budgetProbeServedSQL ends key $1's exhaustions that last past $2.
const budgetProbeServedSQL = `UPDATE sendonce_rate_quota SET exhausted_until = 'epoch', exhausted_by = '', probe_at = 'epoch',
				count_off_until = CASE WHEN exhausted_by = 'count' THEN resets_at ELSE count_off_until END
			WHERE key_fingerprint = $1 AND exhausted_until > $2`

// QuotaProbeServed ends the exhaustions of the API key with fingerprint
// fp that last past now: the API served its probe. An exhaustion by the
// count turns the count off until the reset. The error is the database's,
// unwrapped.
func QuotaProbeServed(ctx context.Context, db DB, fp string, now time.Time) error {
	_, err := db.Exec(ctx, budgetProbeServedSQL, fp, now)
	return err
}

// QuotaStatusRow is one quota of an API key as ReadQuotas reads it.
type QuotaStatusRow struct {
	Fingerprint, Per string
	// Quota is 0 when not known.
	Quota, Used int64
	ResetsAt    time.Time
	// ExhaustedUntil is nil unless the quota is used up now.
	ExhaustedUntil *time.Time
	ExhaustedBy    string
}

// budgetQuotaStatusSQL reads every key's quotas, by fingerprint and
// period.
const budgetQuotaStatusSQL = `SELECT key_fingerprint, period, coalesce(quota, 0), used, resets_at,
			CASE WHEN exhausted_until > clock_timestamp() THEN exhausted_until END, exhausted_by
		FROM sendonce_rate_quota ORDER BY key_fingerprint, period`

// ReadQuotas calls each with every API key's quotas, by fingerprint and
// period. The error is the database's, unwrapped.
func ReadQuotas(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, each func(QuotaStatusRow)) error {
	rows, err := db.Query(ctx, budgetQuotaStatusSQL)
	if err != nil {
		return err
	}
	var q QuotaStatusRow
	_, err = pgx.ForEachRow(rows, []any{&q.Fingerprint, &q.Per, &q.Quota, &q.Used, &q.ResetsAt, &q.ExhaustedUntil, &q.ExhaustedBy}, func() error {
		each(q)
		q = QuotaStatusRow{}
		return nil
	})
	return err
}
