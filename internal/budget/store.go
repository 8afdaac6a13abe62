package budget

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// store reads and writes one API key's budget row, each change in a
// transaction of its own that holds the row locked, on the database's
// clock. It reads clock_timestamp(), not now(): now() is when the
// transaction began, before it waited for the row's lock, and would make
// time run backwards between two workers' changes.
type store struct {
	pool *pgxpool.Pool
	fp   string
}

// change locks the row (making it first if need be), lets fn change it,
// and writes it back.
func (s *store) change(ctx context.Context, fn func(b *bucket) (cut bool)) (bucket, error) {
	var b bucket
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Lock the row; the key's first worker makes it.
		tag, err := tx.Exec(ctx, `SELECT 1 FROM sendonce_rate_budget WHERE key_fingerprint = $1 FOR UPDATE`, s.fp)
		if err == nil && tag.RowsAffected() == 0 {
			_, err = tx.Exec(ctx, `INSERT INTO sendonce_rate_budget (key_fingerprint) VALUES ($1)
				ON CONFLICT (key_fingerprint) DO UPDATE SET key_fingerprint = excluded.key_fingerprint`, s.fp)
		}
		if err != nil {
			return err
		}
		var sinceRefill, pausedFor, probeFor, sinceCut, sinceCeiling, sinceRecent float64
		err = tx.QueryRow(ctx, `SELECT coalesce(ceiling, 0), coalesce(rate, 0), tokens,
				greatest(0, extract(epoch FROM t - refilled_at))::float8,
				greatest(0, extract(epoch FROM paused_until - t))::float8,
				greatest(0, extract(epoch FROM probe_until - t))::float8,
				greatest(0, extract(epoch FROM t - decreased_at))::float8,
				greatest(0, extract(epoch FROM t - ceiling_seen_at))::float8,
				throttles, recent_requests, recent_refusals,
				least(3600, greatest(0, extract(epoch FROM t - recent_at)))::float8
			FROM sendonce_rate_budget, clock_timestamp() AS t WHERE key_fingerprint = $1`, s.fp).
			Scan(&b.ceiling, &b.rate, &b.tokens, &sinceRefill, &pausedFor, &probeFor, &sinceCut, &sinceCeiling,
				&b.throttles, &b.requests, &b.refusals, &sinceRecent)
		if err != nil {
			return err
		}
		b.sinceRefill, b.pausedFor, b.probeFor = seconds(sinceRefill), seconds(pausedFor), seconds(probeFor)
		b.sinceCut, b.sinceCeiling, b.sinceRecent = seconds(sinceCut), seconds(sinceCeiling), seconds(sinceRecent)
		cut := fn(&b)
		_, err = tx.Exec(ctx, `UPDATE sendonce_rate_budget SET ceiling = nullif($2::float8, 0), rate = nullif($3::float8, 0), tokens = $4,
				refilled_at = clock_timestamp() - $5 * interval '1 second',
				paused_until = clock_timestamp() + $6 * interval '1 second',
				probe_until = CASE WHEN $7::float8 > 0 THEN clock_timestamp() + $7::float8 * interval '1 second' ELSE 'epoch' END,
				ceiling_seen_at = clock_timestamp() - $8 * interval '1 second',
				decreased_at = CASE WHEN $9 THEN clock_timestamp() ELSE decreased_at END,
				throttles = $10, recent_requests = $11, recent_refusals = $12,
				recent_at = clock_timestamp() - $13 * interval '1 second'
			WHERE key_fingerprint = $1`,
			s.fp, b.ceiling, b.rate, b.tokens, b.sinceRefill.Seconds(), b.pausedFor.Seconds(), b.probeFor.Seconds(),
			b.sinceCeiling.Seconds(), cut, b.throttles, b.requests, b.refusals, b.sinceRecent.Seconds())
		return err
	})
	if err != nil {
		return bucket{}, fmt.Errorf("budget: %w", err)
	}
	return b, nil
}

func (s *store) lease(ctx context.Context, want int, ceiling float64, maxPause time.Duration) (granted int, wait time.Duration, b bucket, err error) {
	b, err = s.change(ctx, func(b *bucket) bool {
		granted, wait = b.lease(want, ceiling, maxPause)
		return false
	})
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
		s = fmt.Sprintf("%.4g/s of the configured %.4g/s", b.Rate, b.Ceiling)
	case b.Throttles == 0:
		s = fmt.Sprintf("%.4g/s and rising: slow start, no limit configured and none met yet", b.Rate)
	default:
		s = fmt.Sprintf("%.4g/s, found from 429s", b.Rate)
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
	return s
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
	return out, nil
}
