package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/outbox"
)

// Enqueue is scenario 3: how fast an application can write intents, one
// connection, in three transaction shapes, each next to a plain INSERT of
// the same rows in the same shape into PlainTable (the outbox's columns,
// defaults, keys and indexes, without its triggers and without River
// jobs): what the outbox adds over writing the rows at all.
//
// Every timing starts from the same state, whatever ran before it: a
// connection that has already run the statements it is about to time, and
// empty tables (TRUNCATE, which gives them new files, so no dead rows or
// bloat from earlier scenarios: bloated tables measured 30% slower),
// checkpointed. Run checks the tables are empty. The absolute figures still
// follow the machine and its load (see Notes): the ratio to the plain
// INSERT of the same run is the figure to compare.
type Enqueue struct {
	modes []*enqueueMode
	// floor is the plain INSERT of the rows and their River jobs, 1,000 per
	// transaction: what two rows per intent cost at the least.
	floor *Row
	runs  int
}

type enqueueMode struct {
	perTx int  // intents per transaction
	many  bool // one EnqueueMany per transaction, not Enqueue per intent
	n     int  // intents per run
	row   *Row
}

// NewEnqueue returns scenario 3; quick writes fewer intents.
func NewEnqueue(quick bool) *Enqueue {
	scale := 1
	if quick {
		scale = 4
	}
	mk := func(perTx int, many bool, n int, measure string) *enqueueMode {
		n /= scale
		return &enqueueMode{perTx: perTx, many: many, n: n, row: &Row{
			Scenario:     "3. Enqueue",
			Measure:      fmt.Sprintf("%s (%s intents, 1 warm connection, emptied tables)", measure, Thousands(float64(n))),
			Unit:         PerSecond,
			Baseline:     "plain INSERT",
			BaselineUnit: PerSecond,
			RatioUnit:    Times,
		}}
	}
	s := &Enqueue{modes: []*enqueueMode{
		mk(1, false, 2_000, "`Enqueue`, 1 per transaction"),
		mk(100, false, 5_000, "`Enqueue` ×100 per transaction"),
		mk(1000, true, 40_000, "`EnqueueMany` ×1,000 per transaction"),
	}}
	many := s.modes[2].row
	many.Baseline = "the floor (the next row)"
	many.Goal = Goal{Text: "≥ 0.75× the floor", Check: RatioAtLeast(0.75)}
	s.floor = &Row{
		Scenario:     "3. Enqueue",
		Measure:      fmt.Sprintf("the floor: plain INSERT of the rows *and their River jobs*, ×1,000 per transaction, nothing returned (%s intents)", Thousands(float64(s.modes[2].n))),
		Unit:         PerSecond,
		Baseline:     "plain INSERT",
		BaselineUnit: PerSecond,
		RatioUnit:    Times,
	}
	return s
}

// Name is "enqueue".
func (s *Enqueue) Name() string { return "enqueue" }

// Rows are one per transaction shape.
func (s *Enqueue) Rows() []*Row {
	rows := make([]*Row, len(s.modes), len(s.modes)+1)
	for i, m := range s.modes {
		rows[i] = m.row
	}
	return append(rows, s.floor)
}

// Run times every shape once through the outbox and once as plain
// INSERTs (EnqueueMany also as the floor), in an order that turns from run
// to run.
func (s *Enqueue) Run(ctx context.Context, env *Env) error {
	pool, ob, err := env.NewOutbox(ctx, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	turn := s.runs
	s.runs++
	for _, m := range s.modes {
		writers := []func([]outbox.Intent) error{
			func(intents []outbox.Intent) error { return EnqueueIn(ctx, pool, ob, intents, m.perTx, m.many) },
			func(intents []outbox.Intent) error { return PlainInsert(ctx, pool, intents, m.perTx) },
		}
		if m.many {
			writers = append(writers, func(intents []outbox.Intent) error { return FloorInsert(ctx, pool, intents, m.perTx) })
		}
		took := make([]time.Duration, len(writers))
		for i := range writers {
			w := (i + turn) % len(writers)
			// Warm the connection: the statements are prepared before the clock
			// starts.
			if err := writers[w](Intents(fmt.Sprintf("warm%d", m.perTx), 2)); err != nil {
				return err
			}
			if err := resetEmpty(ctx, env); err != nil {
				return err
			}
			intents := Intents(fmt.Sprintf("enq%d", m.perTx), m.n)
			if took[w], err = timeIt(func() error { return writers[w](intents) }); err != nil {
				return err
			}
		}
		o, p := Rate(m.n, took[0]), Rate(m.n, took[1])
		if !m.many {
			env.Logf("enqueue %d per tx: %s/s, plain INSERT %s/s", m.perTx, Thousands(o), Thousands(p))
			m.row.Value.Add(o)
			m.row.BaselineValue.Add(p)
			m.row.Ratio.Add(o / p)
			continue
		}
		// EnqueueMany is judged against the floor, which is judged against
		// the plain INSERT.
		f := Rate(m.n, took[2])
		env.Logf("enqueue %d per tx (many): %s/s, floor %s/s (%.2f×), plain INSERT %s/s", m.perTx, Thousands(o), Thousands(f), o/f, Thousands(p))
		m.row.Value.Add(o)
		m.row.BaselineValue.Add(f)
		m.row.Ratio.Add(o / f)
		s.floor.Value.Add(f)
		s.floor.BaselineValue.Add(p)
		s.floor.Ratio.Add(f / p)
	}
	return nil
}

// FloorInsert writes the intents' rows into PlainTable and a River job for
// each into river_job, perTx per transaction, in one plain statement with
// nothing returned and nothing checked: the least two rows per intent
// cost, which no enqueue that writes the jobs in the producer's
// transaction can beat.
func FloorInsert(ctx context.Context, pool *pgxpool.Pool, intents []outbox.Intent, perTx int) error {
	const floor = `WITH o AS (
			INSERT INTO ` + PlainTable + ` (idempotency_key, kind, payload)
			SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[]))
		INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
		SELECT jsonb_build_object('key', k), 'sendonce_send', 100, '{}', 2, 'sendonce', now(), 'available', '{}'
		FROM unnest($1::text[]) AS k`
	for len(intents) > 0 {
		chunk := intents[:min(perTx, len(intents))]
		intents = intents[len(chunk):]
		keys, kinds, payloads := make([]string, len(chunk)), make([]string, len(chunk)), make([]string, len(chunk))
		for i, in := range chunk {
			keys[i], kinds[i], payloads[i] = in.Key, string(in.Kind), string(in.Payload.([]byte))
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, floor, keys, kinds, payloads)
			return err
		})
		if err != nil {
			return fmt.Errorf("bench: floor insert: %w", err)
		}
	}
	return nil
}

// resetEmpty resets the tables, and checks that the outbox, River's jobs
// and the plain table start from empty files, as the scenario says.
func resetEmpty(ctx context.Context, env *Env) error {
	if err := env.Reset(ctx); err != nil {
		return err
	}
	var size int64
	err := env.Admin.QueryRow(ctx, `SELECT pg_relation_size('sendonce_outbox') + pg_relation_size('river_job') + pg_relation_size($1)`,
		PlainTable).Scan(&size)
	if err != nil {
		return fmt.Errorf("bench: table sizes: %w", err)
	}
	if size != 0 {
		return fmt.Errorf("bench: the tables hold %d bytes after the reset, want none", size)
	}
	return nil
}

func timeIt(fn func() error) (time.Duration, error) {
	t0 := time.Now()
	err := fn()
	return time.Since(t0), err
}

// EnqueueIn writes intents through the outbox, perTx per transaction: with
// one EnqueueMany per transaction when many is set, else with Enqueue per
// intent.
func EnqueueIn(ctx context.Context, pool *pgxpool.Pool, ob *outbox.Outbox, intents []outbox.Intent, perTx int, many bool) error {
	for len(intents) > 0 {
		chunk := intents[:min(perTx, len(intents))]
		intents = intents[len(chunk):]
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if many {
				_, err := ob.EnqueueMany(ctx, tx, chunk)
				return err
			}
			for _, in := range chunk {
				if _, err := ob.Enqueue(ctx, tx, in); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("bench: enqueue: %w", err)
		}
	}
	return nil
}

// createPlainTable creates PlainTable, the enqueue scenario's baseline: a
// table shaped like the outbox (columns, defaults, identity, unique key,
// indexes, checks) without its triggers and without River jobs.
func createPlainTable(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, "CREATE TABLE "+PlainTable+" (LIKE sendonce_outbox INCLUDING ALL)"); err != nil {
		return fmt.Errorf("bench: create %s: %w", PlainTable, err)
	}
	return nil
}

// PlainInsert writes the intents' rows into PlainTable, perTx per
// transaction: one single-row INSERT per intent, except that a
// transaction of more than 100 uses one multi-row INSERT from arrays, the
// fastest plain form (as EnqueueMany does).
func PlainInsert(ctx context.Context, pool *pgxpool.Pool, intents []outbox.Intent, perTx int) error {
	const one = "INSERT INTO " + PlainTable + " (idempotency_key, kind, payload) VALUES ($1, $2, $3)"
	const many = "INSERT INTO " + PlainTable + " (idempotency_key, kind, payload) " +
		"SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[])"
	for len(intents) > 0 {
		chunk := intents[:min(perTx, len(intents))]
		intents = intents[len(chunk):]
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if perTx > 100 {
				keys, kinds, payloads := make([]string, len(chunk)), make([]string, len(chunk)), make([]string, len(chunk))
				for i, in := range chunk {
					keys[i], kinds[i], payloads[i] = in.Key, string(in.Kind), string(in.Payload.([]byte))
				}
				_, err := tx.Exec(ctx, many, keys, kinds, payloads)
				return err
			}
			for _, in := range chunk {
				if _, err := tx.Exec(ctx, one, in.Key, string(in.Kind), string(in.Payload.([]byte))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("bench: plain insert: %w", err)
		}
	}
	return nil
}

// Notes describe the measurement.
func (s *Enqueue) Notes() []string {
	return []string{"**3. Enqueue.** One goroutine on one connection writes email intents of about 300 bytes " +
		"(unique keys, so every one is inserted) in transactions of 1, 100 and 1,000; the clock covers the " +
		"transactions, commits included. The baseline writes the same rows in the same transaction shapes with " +
		"plain SQL into `" + PlainTable + "`, a table created `LIKE sendonce_outbox INCLUDING ALL` (same columns, " +
		"defaults, identity, unique key, indexes and checks; no triggers, no River job): single-row INSERTs for 1 and " +
		"100 per transaction, one `INSERT … SELECT FROM unnest(…)` for 1,000. The outbox also inserts a River job per " +
		"intent, validates in Go (its trigger checks only rows inserted without a job), and returns the stored rows. " +
		"Every timing starts on a warm connection (the same statements run once, untimed) and on emptied tables: " +
		"`TRUNCATE` (new, empty files: nothing left, dead or alive, by earlier scenarios; the run checks they are empty), " +
		"then `CHECKPOINT`. A cold connection, or a fresh cluster, measured the same within the noise between runs; " +
		"tables bloated as a drain leaves them (every row updated twice, the jobs deleted) measured about 30% slower. " +
		"The machine matters most: an earlier 12,000/s was measured on a machine whose plain INSERT ran at 44,000/s, " +
		"half of this one's, and on two shared cores the figure moves with other load. Compare the ratio to the plain " +
		"INSERT, measured in the same run. The `EnqueueMany` row is judged against the floor row, timed in the same run: the floor writes the same rows and a River job for each (River's " +
		"columns, into `river_job` with its indexes) in one plain statement per 1,000, returning nothing and " +
		"checking nothing: no enqueue that writes the jobs in the producer's transaction can be faster, and its " +
		"ratio to the plain INSERT bounds what `EnqueueMany` can reach. The three are timed in an order that turns from run to run."}
}
