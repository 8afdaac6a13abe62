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
	"github.com/jackc/pgx/v5/pgxpool"

	dbstore "github.com/sendonce/sendonce/internal/base/store"
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
type querier = dbstore.DB

// try is one read, change and conditional write of the row: errChanged
// when another worker wrote it in between (or made it first).
func (s *store) try(ctx context.Context, db querier, tx pgx.Tx, fn func(tx pgx.Tx, b *bucket) (bool, error)) (bucket, error) {
	var b bucket
	var row dbstore.RateBudget
	read := func() (err error) {
		row, err = dbstore.ReadRateBudget(ctx, db, s.fp)
		return err
	}
	err := read()
	if errors.Is(err, pgx.ErrNoRows) {
		// The key's first worker makes the row (in the same transaction,
		// when there is one: it must not be rolled back before the read).
		if err := dbstore.MakeRateBudget(ctx, db, s.fp); err != nil {
			return bucket{}, err
		}
		err = read()
	}
	if err != nil {
		return bucket{}, err
	}
	b.ceiling, b.rate, b.tokens, b.throttles, b.requests, b.refusals = row.Ceiling, row.Rate, row.Tokens, row.Throttles, row.Requests, row.Refusals
	b.sinceRefill, b.pausedFor, b.probeFor = seconds(row.SinceRefill), seconds(row.PausedFor), seconds(row.ProbeFor)
	b.sinceCut, b.sinceCeiling, b.sinceRecent = seconds(row.SinceCut), seconds(row.SinceCeiling), seconds(row.SinceRecent)
	cut, err := fn(tx, &b)
	if err != nil {
		return bucket{}, err
	}
	wrote, err := dbstore.WriteRateBudget(ctx, db, s.fp, &dbstore.RateBudget{Version: row.Version, T: row.T,
		Ceiling: b.ceiling, Rate: b.rate, Tokens: b.tokens, SinceRefill: b.sinceRefill.Seconds(), PausedFor: b.pausedFor.Seconds(),
		ProbeFor: b.probeFor.Seconds(), SinceCeiling: b.sinceCeiling.Seconds(), Throttles: b.throttles,
		Requests: b.requests, Refusals: b.refusals, SinceRecent: b.sinceRecent.Seconds()}, cut)
	if err != nil {
		return bucket{}, err
	}
	if !wrote {
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
	err := dbstore.EndRateProbe(ctx, s.pool, s.fp)
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
	rows, err := dbstore.ReadRateBudgets(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("budget: read: %w", err)
	}
	out := make([]Status, len(rows))
	for i, r := range rows {
		out[i] = Status{KeyFingerprint: r.Fingerprint, Ceiling: r.Ceiling, Rate: r.Rate,
			PausedFor: seconds(r.PausedFor), ProbingFor: seconds(r.ProbingFor), Throttles: r.Throttles}
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
