package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
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

// lockPoll is how often a migration waiting for another's lock tries it
// again.
const lockPoll = 100 * time.Millisecond

// Up applies River's migrations and then sendonce's, each only if not
// already applied, one process at a time (under an advisory lock).
//
// It works through a connection pooler (PgBouncer) in transaction or
// session mode as well as directly. Behind a pooler (the server's backend
// is not the one the connection was told of at connect) the lock is a
// transaction's, held open on a connection of its own until the end, since
// a session's lock taken through transaction pooling would stay on
// whichever server connection took it; and when pool names prepared
// statements (pgx's default, which transaction pooling breaks), Up runs
// the migrations on a pool of its own in pgx.QueryExecModeExec. Behind a
// transaction pooler it needs two server connections at once.
func Up(ctx context.Context, pool *pgxpool.Pool) (*Result, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Release()
	var pid uint32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeExec).Scan(&pid); err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	pooled := pid != conn.Conn().PgConn().PID()
	unlock, err := lock(ctx, conn.Conn(), pooled)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if pooled && pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		cfg := pool.Config()
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		cfg.MinConns = 0
		own, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("migrate: connect: %w", err)
		}
		defer own.Close()
		pool = own
	}

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

// lock takes the migrations' advisory lock on conn, and returns what
// releases it. It waits between tries, never in a statement: a statement
// waiting for the lock holds a snapshot, and CREATE INDEX CONCURRENTLY (in
// the migrations of the process holding it) waits for every such snapshot
// to go, so two processes migrating a new database at once would wait for
// each other for ever. Behind a pooler (pooled) the lock is a
// transaction's, in a transaction held open until the release; directly,
// a session's. The tries go by the simple protocol: by the extended one,
// the statement's unnamed portal would stay open in the idle transaction,
// and its snapshot with it (pg_stat_activity's backend_xmin), for the
// index to wait for.
func lock(ctx context.Context, conn *pgx.Conn, pooled bool) (unlock func(), err error) {
	try := `SELECT pg_try_advisory_lock($1)`
	unlock = func() {
		conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, pgx.QueryExecModeExec, lockID) //nolint:errcheck
	}
	var tx pgx.Tx
	if pooled {
		if tx, err = conn.Begin(ctx); err != nil {
			return nil, fmt.Errorf("migrate: take advisory lock: %w", err)
		}
		try = `SELECT pg_try_advisory_xact_lock($1)`
		unlock = func() { tx.Rollback(context.WithoutCancel(ctx)) } //nolint:errcheck
	}
	for {
		var ok bool
		if err := conn.QueryRow(ctx, try, pgx.QueryExecModeSimpleProtocol, lockID).Scan(&ok); err != nil {
			if tx != nil {
				tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
			}
			return nil, fmt.Errorf("migrate: take advisory lock: %w", err)
		}
		if ok {
			return unlock, nil
		}
		select {
		case <-ctx.Done():
			if tx != nil {
				tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
			}
			return nil, fmt.Errorf("migrate: wait for another migration's lock: %w", ctx.Err())
		case <-time.After(lockPoll):
		}
	}
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

// RetiredVersions are the sendonce migration versions that were never
// used: numbers given to work that was merged under another number. The
// versions applied skip them (1…11, 13…20, 22…); no migration is missing.
// A test holds the list to the gaps in sql/.
var RetiredVersions = []int64{12, 21}

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
