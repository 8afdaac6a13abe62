package budget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// store reads and writes one API key's budget row, on the database's
// clock. A change is two statements and no transaction: it reads the row
// with its version (xmin) and clock_timestamp(), lets fn change it, and
// writes it back only if no other worker wrote it meanwhile, or reads it
// again. A lock held across a transaction cost five round trips and a
// wait for the lock for every lease (issue 23: three workers waiting at
// 20/s spent 5.5 ms of database CPU per intent). Times are read as of t,
// the read's clock_timestamp(), and written as of t too, so a change takes
// effect as of the instant it read: two workers' changes cannot interleave
// (the second one's write finds the version changed and reads again).
type store struct {
	pool *pgxpool.Pool
	fp   string
	// quota counts the key's quotas in each lease's transaction (quota.go);
	// apiRate caps the fleet's rate at what the API's rate headers say
	// (headers.go).
	quota   *quotas
	apiRate apiRate
	last    bucket // as of the last lease, for leases answered from memory
}

// maxConflicts bounds the reads again of a change whose write found the
// row changed by another worker.
const maxConflicts = 50

// change reads the row (making it first if need be), lets fn change it,
// and writes it back, in two statements and no transaction.
func (s *store) change(ctx context.Context, fn func(b *bucket) (cut bool)) (bucket, error) {
	return s.changeTx(ctx, false, func(_ pgx.Tx, b *bucket) (bool, error) { return fn(b), nil })
}

// errChanged is a write that found the row changed since it was read.
var errChanged = errors.New("budget: the row changed")

// changeTx is change with, when inTx, both statements and fn's own (the
// quotas' count) in one transaction, which a conflicting write rolls back
// before the change is read again; fn's tx is nil otherwise.
func (s *store) changeTx(ctx context.Context, inTx bool, fn func(tx pgx.Tx, b *bucket) (cut bool, err error)) (bucket, error) {
	for range maxConflicts {
		var b bucket
		var err error
		if inTx {
			err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				var terr error
				b, terr = s.try(ctx, tx, tx, fn)
				return terr
			})
		} else {
			b, err = s.try(ctx, s.pool, nil, fn)
		}
		if errors.Is(err, errChanged) {
			continue // another worker wrote the row since it was read
		}
		if err != nil {
			return bucket{}, fmt.Errorf("budget: %w", err)
		}
		return b, nil
	}
	return bucket{}, errors.New("budget: the budget row kept changing under this worker's writes")
}

// querier is the pool, or a change's transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// try is one read, change and conditional write of the row: errChanged
// when another worker wrote it in between (or made it first).
func (s *store) try(ctx context.Context, db querier, tx pgx.Tx, fn func(tx pgx.Tx, b *bucket) (bool, error)) (bucket, error) {
	var b bucket
	var version string
	var t time.Time
	var sinceRefill, pausedFor, probeFor, sinceCut, sinceCeiling, sinceRecent float64
	read := func() error {
		return db.QueryRow(ctx, `SELECT xmin::text, t, coalesce(ceiling, 0), coalesce(rate, 0), tokens,
				greatest(0, extract(epoch FROM t - refilled_at))::float8,
				greatest(0, extract(epoch FROM paused_until - t))::float8,
				greatest(0, extract(epoch FROM probe_until - t))::float8,
				greatest(0, extract(epoch FROM t - decreased_at))::float8,
				greatest(0, extract(epoch FROM t - ceiling_seen_at))::float8,
				throttles, recent_requests, recent_refusals,
				least(3600, greatest(0, extract(epoch FROM t - recent_at)))::float8
			FROM sendonce_rate_budget, clock_timestamp() AS t WHERE key_fingerprint = $1`, s.fp).
			Scan(&version, &t, &b.ceiling, &b.rate, &b.tokens, &sinceRefill, &pausedFor, &probeFor, &sinceCut, &sinceCeiling,
				&b.throttles, &b.requests, &b.refusals, &sinceRecent)
	}
	err := read()
	if errors.Is(err, pgx.ErrNoRows) {
		// The key's first worker makes the row (in the same transaction,
		// when there is one: it must not be rolled back before the read).
		if _, err := db.Exec(ctx, `INSERT INTO sendonce_rate_budget (key_fingerprint) VALUES ($1) ON CONFLICT DO NOTHING`, s.fp); err != nil {
			return bucket{}, err
		}
		err = read()
	}
	if err != nil {
		return bucket{}, err
	}
	b.sinceRefill, b.pausedFor, b.probeFor = seconds(sinceRefill), seconds(pausedFor), seconds(probeFor)
	b.sinceCut, b.sinceCeiling, b.sinceRecent = seconds(sinceCut), seconds(sinceCeiling), seconds(sinceRecent)
	cut, err := fn(tx, &b)
	if err != nil {
		return bucket{}, err
	}
	tag, err := db.Exec(ctx, `UPDATE sendonce_rate_budget SET ceiling = nullif($3::float8, 0), rate = nullif($4::float8, 0), tokens = $5,
			refilled_at = $2::timestamptz - $6 * interval '1 second',
			paused_until = $2::timestamptz + $7 * interval '1 second',
			probe_until = CASE WHEN $8::float8 > 0 THEN $2::timestamptz + $8::float8 * interval '1 second' ELSE 'epoch' END,
			ceiling_seen_at = $2::timestamptz - $9 * interval '1 second',
			decreased_at = CASE WHEN $10 THEN $2::timestamptz ELSE decreased_at END,
			throttles = $11, recent_requests = $12, recent_refusals = $13,
			recent_at = $2::timestamptz - $14 * interval '1 second'
		WHERE key_fingerprint = $1 AND xmin::text = $15`,
		s.fp, t, b.ceiling, b.rate, b.tokens, b.sinceRefill.Seconds(), b.pausedFor.Seconds(), b.probeFor.Seconds(),
		b.sinceCeiling.Seconds(), cut, b.throttles, b.requests, b.refusals, b.sinceRecent.Seconds(), version)
	if err != nil {
		return bucket{}, err
	}
	if tag.RowsAffected() != 1 {
		return bucket{}, errChanged
	}
	return b, nil
}

func (s *store) lease(ctx context.Context, want int, ceiling float64, maxPause time.Duration) (granted int, wait time.Duration, b bucket, err error) {
	if wait, ok := s.quota.held(time.Now()); ok {
		return 0, wait, s.last, nil
	}
	// The quotas are counted in the lease's transaction while this worker
	// knows of one (configured, or found in the rows); otherwise a lease
	// is two statements, and looks for quotas the API reported to another
	// worker every quotaRecheck.
	counting := s.quota.counting.Load() || time.Since(s.quota.checkedAt) >= quotaRecheck
	b, err = s.changeTx(ctx, counting, func(tx pgx.Tx, b *bucket) (bool, error) {
		granted, wait = 0, 0
		allow := want
		var ql *quotaLease
		if counting {
			var err error
			if ql, err = s.quota.begin(ctx, tx, s.fp, want); err != nil {
				return false, err
			}
			allow = ql.allow
		}
		if allow == 0 {
			wait = ql.wait
		} else {
			s.apiRate.cap(b, time.Now())
			granted, wait = b.lease(allow, ceiling, maxPause)
			s.apiRate.cap(b, time.Now())
		}
		if ql == nil {
			return false, nil
		}
		s.quota.checkedAt = time.Now()
		return false, ql.commit(ctx, tx, s.fp, granted)
	})
	if err == nil {
		s.last = b
		s.quota.hold(granted, wait, time.Now())
	}
	return granted, wait, b, err
}

func (s *store) throttle(ctx context.Context, pause time.Duration, maxPause time.Duration) (bucket, error) {
	return s.change(ctx, func(b *bucket) bool { return b.throttle(pause, -1, maxPause) })
}

func (s *store) refused(ctx context.Context, pause, tokenAge, maxPause time.Duration) (signal bool, b bucket, err error) {
	b, err = s.change(ctx, func(b *bucket) bool {
		var cut bool
		signal, cut = b.refused(pause, tokenAge, maxPause)
		return cut
	})
	return signal, b, err
}

// endProbe ends the fleet's probing: the API served a request. A pause
// begun since (a later probe met another long Retry-After) keeps its
// probing.
func (s *store) endProbe(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `UPDATE sendonce_rate_budget SET probe_until = 'epoch'
		WHERE key_fingerprint = $1 AND probe_until > clock_timestamp() AND paused_until <= clock_timestamp()`, s.fp)
	if err != nil {
		return fmt.Errorf("budget: end the probe: %w", err)
	}
	return nil
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// Status is one API key's budget as the workers see it.
type Status struct {
	KeyFingerprint string `json:"keyFingerprint"`
	// Ceiling is the configured rate in requests per second: the most
	// generous of the workers that leased in the last minute; 0 when the
	// fleet finds the limit from 429s.
	Ceiling float64 `json:"ceiling"`
	// Rate is the rate the fleet sends at now; 0 before the first lease.
	Rate float64 `json:"rate"`
	// PausedFor is how much longer the fleet waits (a Retry-After, at
	// most the workers' max pause).
	PausedFor time.Duration `json:"pausedForNanos"`
	// ProbingFor is how much longer, after the pause, the fleet sends
	// single requests only (the rest of a Retry-After longer than the
	// max pause), unless the API serves one first.
	ProbingFor time.Duration `json:"probingForNanos"`
	// Throttles counts the 429s that lowered the rate.
	Throttles int64 `json:"throttles"`
	// Quotas are the key's quotas (per day, per month), as counted.
	Quotas []QuotaStatus `json:"quotas,omitempty"`
}

// Describe says in a few words how the fleet sends: the rate, whether it
// was configured or found from 429s, the cuts, a pause. `sendonce status`
// and the outbox page show it.
func (b Status) Describe() string {
	var s string
	switch {
	case b.Rate == 0:
		s = "no send yet"
	case b.Ceiling > 0:
		s = fmt.Sprintf("%s/s of the configured %s/s", rateText(b.Rate), rateText(b.Ceiling))
	case b.Throttles == 0:
		s = fmt.Sprintf("%s/s and rising: slow start, no limit configured and none met yet", rateText(b.Rate))
	default:
		s = fmt.Sprintf("%s/s, found from 429s", rateText(b.Rate))
	}
	if b.Throttles > 0 {
		s += fmt.Sprintf(", lowered %d times by 429s", b.Throttles)
	}
	if b.PausedFor > 0 {
		s += fmt.Sprintf(", paused for %s more", b.PausedFor.Round(100*time.Millisecond))
	}
	if b.ProbingFor > 0 {
		s += fmt.Sprintf(", then single requests (probes) for up to %s more, until the API serves one", b.ProbingFor.Round(time.Second))
	}
	for _, q := range b.Quotas {
		s += "; " + q.Describe()
	}
	return s
}

// rateText writes a rate plainly, never in exponent form (%.4g wrote
// 26450 as 2.645e+04): a whole number from 100 on, else with three
// significant digits at most ("26450", "12.5", "0.579").
func rateText(r float64) string {
	if r >= 100 || r <= 0 {
		return strconv.FormatFloat(math.Round(max(r, 0)), 'f', -1, 64)
	}
	s := strconv.FormatFloat(r, 'f', 2-int(math.Floor(math.Log10(r))), 64)
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

// Read returns the budget of every API key that has one.
func Read(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]Status, error) {
	rows, err := db.Query(ctx, `SELECT key_fingerprint, coalesce(ceiling, 0), coalesce(rate, 0),
			greatest(0, extract(epoch FROM paused_until - t))::float8,
			greatest(0, extract(epoch FROM probe_until - greatest(t, paused_until)))::float8, throttles
		FROM sendonce_rate_budget, clock_timestamp() AS t ORDER BY key_fingerprint`)
	if err != nil {
		return nil, fmt.Errorf("budget: read: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Status, error) {
		var st Status
		var paused, probing float64
		err := r.Scan(&st.KeyFingerprint, &st.Ceiling, &st.Rate, &paused, &probing, &st.Throttles)
		st.PausedFor, st.ProbingFor = seconds(paused), seconds(probing)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("budget: read: %w", err)
	}
	qs, err := readQuotas(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("budget: read the quotas: %w", err)
	}
	for i := range out {
		out[i].Quotas = qs[out[i].KeyFingerprint]
	}
	return out, nil
}
