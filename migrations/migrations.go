package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed sql/*.sql
var embedded embed.FS

// TableName is the table in which goose records sendonce's applied versions.
const TableName = "sendonce_schema_migrations"

// lockID is the advisory lock key held while migrating ("sendonce" in hex,
// truncated to fit a bigint).
const lockID int64 = 0x73656e646f6e6365

// Result tells what Up did.
type Result struct {
	// River lists the River migration versions applied by this run.
	River []int
	// Sendonce lists the sendonce migration versions applied by this run.
	Sendonce []int64
}

// Applied reports whether the run changed the schema at all.
func (r *Result) Applied() bool { return len(r.River) > 0 || len(r.Sendonce) > 0 }

// Up applies River's migrations and then sendonce's, each only if not
// already applied.
func Up(ctx context.Context, pool *pgxpool.Pool) (*Result, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return nil, fmt.Errorf("migrate: take advisory lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockID) //nolint:errcheck

	res := &Result{}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	riverRes, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	for _, v := range riverRes.Versions {
		res.River = append(res.River, v.Version)
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := newProvider(db)
	if err != nil {
		return nil, err
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: sendonce: %w", err)
	}
	for _, r := range results {
		res.Sendonce = append(res.Sendonce, r.Source.Version)
	}
	return res, nil
}

// Pending reports whether any migration, River's or sendonce's, is not yet
// applied. The worker refuses to start against a database that needs one.
func Pending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return false, fmt.Errorf("migrate: river: %w", err)
	}
	existing, err := migrator.ExistingVersions(ctx)
	if err != nil {
		return false, fmt.Errorf("migrate: river versions: %w", err)
	}
	if len(existing) < len(migrator.AllVersions()) {
		return true, nil
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := newProvider(db)
	if err != nil {
		return false, err
	}
	pending, err := provider.HasPending(ctx)
	if err != nil {
		return false, fmt.Errorf("migrate: sendonce versions: %w", err)
	}
	return pending, nil
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	fsys, err := fs.Sub(embedded, "sql")
	if err != nil {
		return nil, fmt.Errorf("migrate: embedded files: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(TableName),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("migrate: sendonce: %w", err)
	}
	return provider, nil
}

// ErrPending is returned on a database whose schema is missing or older than
// this code's: by the command's subcommands, by worker.New, and by
// Outbox.Enqueue and EnqueueMany (errors.Is(err, migrations.ErrPending)).
// The fix is Up, or `sendonce migrate`.
var ErrPending = errors.New("the database needs migrating: run `sendonce migrate` (or migrations.Up from Go)")
