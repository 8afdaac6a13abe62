package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/migrations"
	"github.com/sendonce/sendonce/outbox"
)

// DefaultPoolConns is the size of the pools the worker and the River
// baselines get in every scenario. pgxpool's own default (the number of
// cores, at least 4) throttles a worker running hundreds of sends at once,
// each of which makes two short statements; on two cores, pools much
// larger than this measured slower (more backends contending for the WAL
// lock and the CPU), not faster.
const DefaultPoolConns = 20

// Env is the database every scenario of one benchmark run shares: a
// migrated database of its own on a server given by URL, or on a
// throwaway durable cluster started for the run.
type Env struct {
	// URL connects to the benchmark's own database.
	URL string
	// ServerVersion is the server's version string.
	ServerVersion string
	// Admin is a small pool for setup, resets and checks; scenarios make
	// their own pools for the figures they measure.
	Admin *pgxpool.Pool
	// PoolConns sizes the pools scenarios make for workers.
	PoolConns int
	// Logf receives progress lines.
	Logf func(format string, args ...any)

	cluster *pgcluster.Cluster
	db      *pgcluster.Database
}

// EnvOptions tune Open.
type EnvOptions struct {
	// ServerURL is a PostgreSQL server to use; empty starts a throwaway
	// cluster with fsync on. A database of the benchmark's own is created
	// on it (so the role needs CREATEDB) and dropped by Close: the
	// server's other databases are never touched.
	ServerURL string
	// PoolConns sizes the worker pools (default DefaultPoolConns).
	PoolConns int
	// Logf receives progress lines (default: none).
	Logf func(format string, args ...any)
}

// ServerURLFromEnv returns BENCH_DATABASE_URL, else DATABASE_URL, else "".
func ServerURLFromEnv() string {
	for _, name := range []string{"BENCH_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return ""
}

// Open prepares the benchmark database: it starts a cluster unless a
// server is given, creates a fresh database and migrates it.
func Open(ctx context.Context, opts EnvOptions) (*Env, error) {
	e := &Env{PoolConns: opts.PoolConns, Logf: opts.Logf}
	if e.PoolConns <= 0 {
		e.PoolConns = DefaultPoolConns
	}
	if e.Logf == nil {
		e.Logf = func(string, ...any) {}
	}
	serverURL := opts.ServerURL
	if serverURL == "" {
		// Durable: fsync and synchronous commit on, like the River baseline
		// in shared/river-notes.md and like production. The worker's pool,
		// the baseline's and the memory scenario's separate process fit
		// well within 300 connections.
		c, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true, MaxConnections: 300, Logf: e.Logf})
		if err != nil {
			return nil, err
		}
		e.cluster = c
		serverURL = c.URL
	}
	if err := e.setup(ctx, serverURL); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// setup creates, connects to and migrates the benchmark's own database,
// with the enqueue scenario's plain baseline table beside the outbox.
func (e *Env) setup(ctx context.Context, serverURL string) error {
	db, err := pgcluster.CreateDatabase(ctx, serverURL, "sendonce_bench_", "")
	if err != nil {
		return err
	}
	e.db, e.URL = db, db.URL
	if e.Admin, err = e.NewPool(ctx, 4); err != nil {
		return err
	}
	if err := e.Admin.QueryRow(ctx, "SHOW server_version").Scan(&e.ServerVersion); err != nil {
		return fmt.Errorf("bench: server version: %w", err)
	}
	if _, err := migrations.Up(ctx, e.Admin); err != nil {
		return fmt.Errorf("bench: migrate: %w", err)
	}
	return createPlainTable(ctx, e.Admin)
}

// NewPool opens a pool of at most maxConns connections to the benchmark
// database.
func (e *Env) NewPool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: pool config: %w", err)
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("bench: ping: %w", err)
	}
	return pool, nil
}

// Reset empties the outbox, River's job table, the tenants' settings and
// the plain baseline table, so each measurement starts from the same
// empty tables, and checkpoints.
func (e *Env) Reset(ctx context.Context) error {
	// The send budget goes too: a rate the rate-limited drain found for the
	// benchmark's API key would otherwise pace the scenarios after it; and
	// the tenants' settings and counts, which the tenants scenario sets.
	if _, err := e.Admin.Exec(ctx, "TRUNCATE sendonce_outbox, river_job, sendonce_rate_budget, sendonce_tenant, "+PlainTable+" RESTART IDENTITY"); err != nil {
		return fmt.Errorf("bench: reset tables: %w", err)
	}
	return e.Checkpoint(ctx)
}

// Checkpoint forces a checkpoint, so that one is unlikely to fall inside
// the measurement that follows. On a server of your own it needs superuser
// or pg_checkpoint; a refusal is ignored.
func (e *Env) Checkpoint(ctx context.Context) error {
	_, _ = e.Admin.Exec(ctx, "CHECKPOINT")
	return ctx.Err()
}

// Outbox returns an Outbox over pool.
func (e *Env) Outbox(pool *pgxpool.Pool) (*outbox.Outbox, error) {
	return outbox.New(pool, nil)
}

// NewOutbox opens a pool of maxConns connections (NewPool) and an Outbox
// over it; the caller closes the pool.
func (e *Env) NewOutbox(ctx context.Context, maxConns int) (*pgxpool.Pool, *outbox.Outbox, error) {
	pool, err := e.NewPool(ctx, maxConns)
	if err != nil {
		return nil, nil, err
	}
	ob, err := e.Outbox(pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, ob, nil
}

// CountState counts the outbox rows in a state.
func (e *Env) CountState(ctx context.Context, state outbox.State) (int, error) {
	var n int
	err := e.Admin.QueryRow(ctx, "SELECT count(*) FROM sendonce_outbox WHERE state = $1", string(state)).Scan(&n)
	return n, err
}

// Close drops the benchmark database and stops the cluster if Open started
// one.
func (e *Env) Close() {
	if e.Admin != nil {
		e.Admin.Close()
	}
	if e.db != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := e.db.Drop(ctx); err != nil {
			e.Logf("%v", err)
		}
		cancel()
	}
	if e.cluster != nil {
		if err := e.cluster.Stop(); err != nil {
			e.Logf("bench: %v", err)
		}
	}
}
