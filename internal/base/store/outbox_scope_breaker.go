package store

import (
	"context"
	"time"
)

// The statements of the topics' and tenants' breakers (migration 00034):
// their settings, their judgement and a resume.

// setScopeBreakerSQL is SetScopeBreaker's statement.
const setScopeBreakerSQL = `INSERT INTO sendonce_breaker AS b (scope, name, off, bounce_rate, complaint_rate, min_outcomes)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (scope, name) DO UPDATE SET off = EXCLUDED.off, bounce_rate = EXCLUDED.bounce_rate,
			complaint_rate = EXCLUDED.complaint_rate, min_outcomes = EXCLUDED.min_outcomes, changed_at = now()`

// SetScopeBreaker sets the breaker of a topic or tenant (scope "topic" or
// "tenant"; name "*": the scope's defaults).
func SetScopeBreaker(ctx context.Context, db DB, scope, name string, off bool, bounce, complaint float64, minOutcomes int) error {
	_, err := db.Exec(ctx, setScopeBreakerSQL, scope, name, off, bounce, complaint, minOutcomes)
	return err
}

// ScopeBreakerRow is a topic's or tenant's breaker as ScopeBreakers reads
// it: its settings (its own, the scope's defaults, or the built-in ones:
// Own and Defaults say which), the counts it judges (since its last
// resume) and its trip.
type ScopeBreakerRow struct {
	Scope, Name                         string
	Own, Defaults                       bool
	Off                                 bool
	BounceRate, ComplaintRate           float64
	MinOutcomes                         int
	ChangedAt                           *time.Time
	Known, Hard, Complained             int64
	TrippedAt                           *time.Time
	Reason                              string
	TripKnown, TripHard, TripComplained int64
}

// scopeBreakersSQL is ScopeBreakers' statement: every topic and tenant
// with counted outcomes, settings or a state, and the scopes' defaults.
const scopeBreakersSQL = `WITH names AS (
			SELECT DISTINCT scope, name FROM sendonce_breaker_outcome
			UNION SELECT scope, name FROM sendonce_breaker
			UNION SELECT scope, name FROM sendonce_breaker_state),
		sums AS (SELECT scope, name, sum(known) AS known, sum(hard) AS hard, sum(complained) AS complained
			FROM sendonce_breaker_outcome GROUP BY scope, name)
		SELECT n.scope, n.name, own.name IS NOT NULL, def.name IS NOT NULL,
			coalesce(own.off, def.off, false), coalesce(own.bounce_rate, def.bounce_rate, 0.05),
			coalesce(own.complaint_rate, def.complaint_rate, 0.001), coalesce(own.min_outcomes, def.min_outcomes, 1000),
			coalesce(own.changed_at, def.changed_at),
			coalesce(s.known, 0) - coalesce(st.since_known, 0), coalesce(s.hard, 0) - coalesce(st.since_hard, 0),
			coalesce(s.complained, 0) - coalesce(st.since_complained, 0),
			st.tripped_at, coalesce(st.reason, ''), coalesce(st.trip_known, 0), coalesce(st.trip_hard, 0), coalesce(st.trip_complained, 0)
		FROM names n
		LEFT JOIN sendonce_breaker own ON own.scope = n.scope AND own.name = n.name
		LEFT JOIN sendonce_breaker def ON def.scope = n.scope AND def.name = '*' AND n.name <> '*'
		LEFT JOIN sums s ON s.scope = n.scope AND s.name = n.name
		LEFT JOIN sendonce_breaker_state st ON st.scope = n.scope AND st.name = n.name
		WHERE ($1 = '' OR n.scope = $1) AND ($2 = '' OR n.name = $2)
		ORDER BY n.scope DESC, n.name`

// ScopeBreakers reads the breakers of the topics and tenants (scope and
// name, when not empty, pick one).
func ScopeBreakers(ctx context.Context, db DB, scope, name string) ([]ScopeBreakerRow, error) {
	rows, err := db.Query(ctx, scopeBreakersSQL, scope, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ScopeBreakerRow
	for rows.Next() {
		var r ScopeBreakerRow
		if err := rows.Scan(&r.Scope, &r.Name, &r.Own, &r.Defaults, &r.Off, &r.BounceRate, &r.ComplaintRate, &r.MinOutcomes,
			&r.ChangedAt, &r.Known, &r.Hard, &r.Complained, &r.TrippedAt, &r.Reason, &r.TripKnown, &r.TripHard, &r.TripComplained); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// resumeScopeBreakerSQL is ResumeScopeBreaker's statement: the trip is
// cleared and the counts of now become the baseline, and the runs the
// trip paused (their pause_reason names it) are returned, for the caller
// to resume.
const resumeScopeBreakerSQL = `WITH sums AS (
			SELECT coalesce(sum(known), 0) AS known, coalesce(sum(hard), 0) AS hard, coalesce(sum(complained), 0) AS complained
			FROM sendonce_breaker_outcome WHERE scope = $1 AND name = $2),
		old AS (SELECT tripped_at, reason FROM sendonce_breaker_state WHERE scope = $1 AND name = $2 FOR UPDATE),
		s AS (
			UPDATE sendonce_breaker_state st SET since_known = sums.known, since_hard = sums.hard,
				since_complained = sums.complained, tripped_at = NULL, reason = NULL
			FROM sums WHERE st.scope = $1 AND st.name = $2 AND st.tripped_at IS NOT NULL
			RETURNING st.scope)
		SELECT (SELECT tripped_at FROM old), coalesce((SELECT reason FROM old), ''), (SELECT count(*) FROM s),
			(SELECT max(changed_at) FROM sendonce_breaker WHERE scope = $1 AND name IN ($2, '*')),
			coalesce((SELECT array_agg(r.key ORDER BY r.key) FROM sendonce_run r
				WHERE r.state = 'paused' AND starts_with(r.pause_reason, $3)), '{}')`

// ResumeScopeBreaker clears the trip of a topic's or tenant's breaker:
// it judges only the outcomes after now. It returns the trip's time and
// reason (nil, "": it was not tripped), when its settings last changed,
// and the runs paused by it (their reason starts with prefix).
func ResumeScopeBreaker(ctx context.Context, db DB, scope, name, prefix string) (trippedAt *time.Time, reason string, changedAt *time.Time, runs []string, err error) {
	var n int
	err = db.QueryRow(ctx, resumeScopeBreakerSQL, scope, name, prefix).Scan(&trippedAt, &reason, &n, &changedAt, &runs)
	return trippedAt, reason, changedAt, runs, err
}
