package budget

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	dbstore "github.com/sendonce/sendonce/internal/base/store"
)

// A rate paces, a quota counts. A quota (50000/d, 1000000/mo) is never
// turned into a rate: the fleet sends at its rate until the quota's count
// is used up, then pauses until the quota resets. The count is the fleet's,
// in table sendonce_rate_quota (a row per API key fingerprint and period),
// taken in the same transaction as the rate's lease: every token a lease
// hands out counts, and tokens given back unspent (expired, or dropped on
// a 429) and requests the API refused with a rate-limit 429 are taken off
// again at the next lease, so the count follows the requests the API
// served.
//
// Periods are calendar days and months in one zone, UTC unless configured:
// the email APIs we know reset daily quotas at midnight UTC, and a
// calendar period is a single count in a row, where a rolling 24 hours
// would need every request's time to know when room comes back.
//
// An exhausted quota, by the count or by the API's 429 saying so, lets one
// request through a minute (a probe, for the whole fleet): the API may have
// reset earlier, or raised the quota. A probe the API serves while only the
// count said exhausted turns the count off until the reset; the API's next
// quota 429 stops the fleet again.
//
// The stored verdicts of the count are read against the limit of the
// worker reading them (see judge): a worker restarted with a raised quota
// sends what the new limit leaves at once, one with a lowered quota sends
// nothing more once the count reaches it, and either counts on. The API's
// own verdict holds whatever the limit configured, until its probe.

// Period is what a quota counts over.
type Period string

// The periods of a quota.
const (
	PerDay   Period = "d"  // a calendar day
	PerMonth Period = "mo" // a calendar month
)

// Quota is a limit on the requests of an API key per calendar period.
type Quota struct {
	Count int64
	Per   Period
}

// quotaRecheck is how often a worker that knows of no quota looks for
// one the API reported to another worker of the key.
const quotaRecheck = 10 * time.Second

// quotaProbeEvery spaces the probes of an exhausted quota, fleet-wide.
const quotaProbeEvery = time.Minute

// quotaHold is how long a worker that found the quota exhausted answers
// its sends from memory before it looks at the database again: sends
// waiting for a reset hours away cost a lease a second, not one each.
const quotaHold = time.Second

// quotaState is what the last lease found of the quotas, kept by the store.
type quotaState struct {
	// exhaustedUntil is the reset of an exhausted quota (zero: none).
	exhaustedUntil time.Time
	// holdUntil (the worker's own clock) and holdWait answer leases from
	// memory while the quota is exhausted.
	holdUntil time.Time
	holdWait  time.Duration
}

// quotas is one worker's side of its key's quotas.
type quotas struct {
	configured []Quota
	zone       *time.Location
	now        func() time.Time // nil: the database's clock
	refund     atomic.Int64     // tokens to take off the count at the next lease
	// counting: a quota is configured or known from the API, so every
	// token must be counted (no unlimited sends).
	counting atomic.Bool
	// probe: the last lease granted the fleet's probe of an exhausted quota.
	probe atomic.Bool
	state quotaState // owned by the lease in flight
	// checkedAt is when a lease last read the quota rows (owned by the
	// lease in flight).
	checkedAt time.Time
	// changeLogged: judge logged a quota other than the row's (owned by
	// the lease in flight).
	changeLogged bool
	logger       *slog.Logger
}

func (q *quotas) clock(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	if q.now != nil {
		return q.now(), nil
	}
	return dbstore.QuotaClock(ctx, tx)
}

// periodOf is the calendar period p that holds t, in zone.
func periodOf(p Period, t time.Time, zone *time.Location) (start, end time.Time) {
	t = t.In(zone)
	if p == PerMonth {
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, zone)
		return start, start.AddDate(0, 1, 0)
	}
	start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, zone)
	return start, start.AddDate(0, 0, 1)
}

// quotaRow is a row of sendonce_rate_quota.
type quotaRow struct {
	period         Period
	quota          *int64
	start, resets  time.Time
	used           int64
	exhaustedUntil time.Time
	exhaustedBy    string
	probeAt        time.Time
	countOffUntil  time.Time
}

// quotaLease is the quotas' part of one lease, in its transaction.
type quotaLease struct {
	now   time.Time
	rows  []quotaRow
	allow int           // how many tokens the quotas let the lease take
	wait  time.Duration // when allow is 0: until the next probe or the reset
	probe bool
}

// begin locks the key's quota rows (making the configured ones), starts a
// new period where one has ended, takes refunds off the count and says
// how many tokens the lease may take. It costs one statement when the key
// has no quota.
//
// It is long because it is one transaction's statements in the order they
// lock and write; split up, that order would be harder to check.
func (q *quotas) begin(ctx context.Context, tx pgx.Tx, fp string, want int) (*quotaLease, error) {
	l := &quotaLease{allow: want}
	read := func() error {
		rows, err := dbstore.LockQuotaRows(ctx, tx, fp)
		if err != nil {
			return err
		}
		l.rows = make([]quotaRow, len(rows))
		for i, x := range rows {
			l.rows[i] = quotaRow{period: Period(x.Period), quota: x.Quota, start: x.Start, resets: x.Resets, used: x.Used,
				exhaustedUntil: x.ExhaustedUntil, exhaustedBy: x.ExhaustedBy, probeAt: x.ProbeAt, countOffUntil: x.CountOffUntil}
		}
		return nil
	}
	if err := read(); err != nil {
		return nil, err
	}
	if len(l.rows) == 0 && len(q.configured) == 0 {
		q.state = quotaState{}
		q.counting.Store(false)
		q.probe.Store(false)
		return l, nil // no quota: one statement
	}
	now, err := q.clock(ctx, tx)
	if err != nil {
		return nil, err
	}
	l.now = now
	if missing := q.missing(l.rows); len(missing) > 0 {
		for _, p := range missing {
			start, end := periodOf(p, now, q.zone)
			if err := dbstore.MakeQuotaRow(ctx, tx, fp, string(p), start, end); err != nil {
				return nil, err
			}
		}
		if err := read(); err != nil {
			return nil, err
		}
	}
	refund := q.refund.Swap(0)
	for i := range l.rows {
		r := &l.rows[i]
		if !now.Before(r.resets) {
			// A new period: the count starts again, and an exhaustion
			// ends with the period it was of.
			r.start, r.resets = periodOf(r.period, now, q.zone)
			r.used, r.countOffUntil = 0, time.Time{}
			if !r.exhaustedUntil.After(now) {
				r.exhaustedUntil, r.exhaustedBy = time.Time{}, ""
			}
		} else {
			r.used = max(0, r.used-refund)
		}
		q.judge(r, now)
		if r.exhaustedUntil.After(now) {
			continue
		}
		if r.quota != nil && !r.countOffUntil.After(now) {
			left := *r.quota - r.used
			if left <= 0 {
				r.exhaustedUntil, r.exhaustedBy, r.probeAt = r.resets, "count", now.Add(quotaProbeEvery)
				q.logger.Warn("budget: the fleet has used its quota; it pauses until the quota resets, with one probe a minute",
					"quota", fmt.Sprintf("%d/%s", *r.quota, r.period), "used", r.used, "exhausted_until", r.resets.UTC().Format(time.RFC3339))
				continue
			}
			l.allow = int(min(int64(l.allow), left))
		}
	}
	// Exhausted: a probe a minute, for the whole fleet.
	var until time.Time
	for i := range l.rows {
		r := &l.rows[i]
		if !r.exhaustedUntil.After(now) {
			continue
		}
		until = later(until, r.exhaustedUntil)
	}
	if !until.IsZero() {
		l.allow = 0
		probeAt := time.Time{}
		for _, r := range l.rows {
			if r.exhaustedUntil.After(now) {
				probeAt = later(probeAt, r.probeAt)
			}
		}
		if !now.Before(probeAt) && want > 0 {
			l.allow, l.probe = 1, true
			for i := range l.rows {
				if l.rows[i].exhaustedUntil.After(now) {
					l.rows[i].probeAt = now.Add(quotaProbeEvery)
				}
			}
		} else {
			next := probeAt
			if until.Before(next) {
				next = until
			}
			l.wait = next.Sub(now)
		}
	}
	q.state = quotaState{}
	q.counting.Store(len(l.rows) > 0 || len(q.configured) > 0)
	q.probe.Store(l.probe)
	if !until.IsZero() {
		q.state.exhaustedUntil = until
	}
	return l, nil
}

// judge takes row r's quota to be this worker's (see count) and reads the
// row's state against it, as of now. The count's own verdicts are this
// limit's to make, not the limit's that a worker read before (issue 44: a
// worker restarted from 3/d to 10/d with 3 used found the fleet held until
// the probe, and a probe served in that hold turned the count off):
//
//   - An exhaustion by the count stands only while the count is used up
//     under this limit: with room left (a raised quota, or tokens given
//     back) it ends, and the count decides below, as for any lease. One by
//     the API ("api") stands, whatever the limit: the API's count is what
//     it refuses by, and a configured number does not change it; the probe
//     a minute finds out when it has.
//   - The count turned off by a served probe (count_off_until) said the
//     API allows more than the limit it was counting against; a different
//     limit (the row's quota column is the one last counted against) is
//     the operator's new word, and the count is on again.
func (q *quotas) judge(r *quotaRow, now time.Time) {
	limit := q.count(r.period, r.quota)
	if (limit == nil) != (r.quota == nil) || limit != nil && *limit != *r.quota {
		r.countOffUntil = time.Time{}
		if !q.changeLogged {
			q.changeLogged = true
			q.logger.Info("budget: this worker's quota differs from the one the fleet counted against; the count is judged against this worker's",
				"period", string(r.period), "quota", fmtCount(limit), "was", fmtCount(r.quota), "used", r.used)
		}
	}
	r.quota = limit
	if r.exhaustedBy == "count" && r.exhaustedUntil.After(now) && (r.quota == nil || r.used < *r.quota) {
		r.exhaustedUntil, r.exhaustedBy, r.probeAt = time.Time{}, "", time.Time{}
	}
}

// fmtCount is a quota's count for a log line ("none": not known).
func fmtCount(n *int64) string {
	if n == nil {
		return "none"
	}
	return fmt.Sprint(*n)
}

// missing are the configured periods with no row yet.
func (q *quotas) missing(rows []quotaRow) []Period {
	var out []Period
	for _, c := range q.configured {
		found := false
		for _, r := range rows {
			found = found || r.period == c.Per
		}
		if !found {
			out = append(out, c.Per)
		}
	}
	return out
}

// count is this worker's quota for p, else the row's (a worker configured
// with none counts against the others').
func (q *quotas) count(p Period, row *int64) *int64 {
	for _, c := range q.configured {
		if c.Per == p {
			n := c.Count
			return &n
		}
	}
	return row
}

// held answers a lease from memory while the quota is exhausted (within
// quotaHold of the last look): how long until the next probe or the reset.
func (q *quotas) held(now time.Time) (time.Duration, bool) {
	if now.Before(q.state.holdUntil) {
		return q.state.holdWait - (quotaHold - q.state.holdUntil.Sub(now)), true
	}
	return 0, false
}

// hold starts answering leases from memory, after a lease that found the
// quota exhausted and granted nothing.
func (q *quotas) hold(granted int, wait time.Duration, now time.Time) {
	if granted > 0 || q.state.exhaustedUntil.IsZero() || wait <= quotaHold {
		return
	}
	q.state.holdUntil, q.state.holdWait = now.Add(quotaHold), wait
}

// commit counts the granted tokens and writes the rows back.
func (l *quotaLease) commit(ctx context.Context, tx pgx.Tx, fp string, granted int) error {
	for _, r := range l.rows {
		if l.probe && granted == 0 {
			// The rate had no token for the probe: it goes at the next lease.
			r.probeAt = l.now
		}
		if err := dbstore.WriteQuotaRow(ctx, tx, fp, &dbstore.QuotaRow{Period: string(r.period), Quota: r.quota, Start: r.start,
			Resets: r.resets, Used: r.used + int64(granted), ExhaustedUntil: orEpoch(r.exhaustedUntil), ExhaustedBy: r.exhaustedBy,
			ProbeAt: orEpoch(r.probeAt), CountOffUntil: orEpoch(r.countOffUntil)}); err != nil {
			return err
		}
	}
	return nil
}

// exhausted records the API's answer that the quota of period p is used
// up, until the reset: the fleet pauses until then, with a probe a minute.
// reset is when the API said it resets (0: it did not, the period's end).
func (q *quotas) exhausted(ctx context.Context, s *store, p Period, reset time.Duration) (until time.Time, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now, err := q.clock(ctx, tx)
		if err != nil {
			return err
		}
		start, end := periodOf(p, now, q.zone)
		until = end
		if reset > 0 {
			until = now.Add(reset)
		}
		quota := q.count(p, nil)
		return dbstore.QuotaExhaustedByAPI(ctx, tx, s.fp, string(p), quota, start, end, until, now.Add(quotaProbeEvery))
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("budget: record the exhausted quota: %w", err)
	}
	q.counting.Store(true)
	return until, nil
}

// probeServed ends an exhaustion the API's answer to a probe disproves:
// the API serves again. An exhaustion by the count turns the count off
// until the reset.
func (q *quotas) probeServed(ctx context.Context, s *store) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now, err := q.clock(ctx, tx)
		if err != nil {
			return err
		}
		return dbstore.QuotaProbeServed(ctx, tx, s.fp, now)
	})
	if err != nil {
		return fmt.Errorf("budget: end the quota's exhaustion: %w", err)
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

var epoch = time.Unix(0, 0).UTC()

func orEpoch(t time.Time) time.Time {
	if t.IsZero() {
		return epoch
	}
	return t
}

// QuotaStatus is one quota of an API key as the workers count it.
type QuotaStatus struct {
	// Per is the period: "d" or "mo".
	Per Period `json:"per"`
	// Quota is the configured count (0: known only from the API's 429).
	Quota int64 `json:"quota"`
	// Used is the fleet's count in the period.
	Used int64 `json:"used"`
	// ResetsAt is the end of the period.
	ResetsAt time.Time `json:"resetsAt"`
	// ExhaustedUntil is set while the quota is used up: the fleet sends
	// one probe a minute until then.
	ExhaustedUntil *time.Time `json:"exhaustedUntil,omitempty"`
	// ExhaustedBy says who said so: "count" or "api".
	ExhaustedBy string `json:"exhaustedBy,omitempty"`
}

// Describe says in a few words where the quota stands: "quota exhausted
// until …" while it is used up.
func (q QuotaStatus) Describe() string {
	name := map[Period]string{PerDay: "daily", PerMonth: "monthly"}[q.Per]
	of := ""
	if q.Quota > 0 {
		of = fmt.Sprintf(" of %d/%s", q.Quota, q.Per)
	}
	if q.ExhaustedUntil != nil {
		by := "the count reached it"
		if q.ExhaustedBy == "api" {
			by = "the API said so"
		}
		return fmt.Sprintf("%s quota exhausted until %s (%d used%s; %s; one probe a minute)",
			name, q.ExhaustedUntil.UTC().Format(time.RFC3339), q.Used, of, by)
	}
	return fmt.Sprintf("%s quota: %d used%s, resets %s", name, q.Used, of, q.ResetsAt.UTC().Format(time.RFC3339))
}

// QuotaExhausted reports whether a quota of the key is used up now.
func (b Status) QuotaExhausted() bool {
	for _, q := range b.Quotas {
		if q.ExhaustedUntil != nil {
			return true
		}
	}
	return false
}

// readQuotas returns every key's quotas, by fingerprint.
func readQuotas(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[string][]QuotaStatus, error) {
	out := map[string][]QuotaStatus{}
	err := dbstore.ReadQuotas(ctx, db, func(r dbstore.QuotaStatusRow) {
		q := QuotaStatus{Per: Period(r.Per), Quota: r.Quota, Used: r.Used, ResetsAt: r.ResetsAt,
			ExhaustedUntil: r.ExhaustedUntil, ExhaustedBy: r.ExhaustedBy}
		if q.ExhaustedUntil == nil {
			q.ExhaustedBy = ""
		}
		out[r.Fingerprint] = append(out[r.Fingerprint], q)
	})
	return out, err
}
