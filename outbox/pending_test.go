package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/migrations"
	"github.com/sendonce/sendonce/outbox"
)

// unmigratedPool is a database with no schema at all ("empty"), or with
// River's tables only ("river-only"): what a newcomer has before running
// `sendonce migrate`, or after migrating River by hand.
func unmigratedPool(t *testing.T, label string, river bool) *pgxpool.Pool {
	t.Helper()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pgtest.CreateDB(t, pgtest.ServerURL(t), label))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if river {
		m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

// TestEnqueueUnmigrated: Enqueue and EnqueueMany on a database that was
// never migrated (or only River's part) answer with migrations.ErrPending,
// whose text names the fix, instead of a raw "relation does not exist".
func TestEnqueueUnmigrated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		river bool
		older bool // sendonce's schema as a release before migration 00010 left it
	}{{"empty", false, false}, {"river-only", true, false}, {"older-sendonce", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var pool *pgxpool.Pool
			if tc.older {
				pool = pgtest.NewDB(t)
				pgtest.Exec(t, pool, `ALTER TABLE sendonce_outbox DROP COLUMN traceparent, DROP COLUMN tracestate`)
			} else {
				pool = unmigratedPool(t, "unmigrated", tc.river)
			}
			ob, err := outbox.New(pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			in := outbox.Intent{Key: "welcome:1", Payload: `{"from":"a@example.com","to":["b@example.com"],"subject":"Hi","text":"x"}`}
			calls := map[string]func(context.Context, pgx.Tx) error{
				"Enqueue": func(ctx context.Context, tx pgx.Tx) error { _, err := ob.Enqueue(ctx, tx, in); return err },
				"EnqueueMany": func(ctx context.Context, tx pgx.Tx) error {
					_, err := ob.EnqueueMany(ctx, tx, []outbox.Intent{in, {Key: "welcome:2", Payload: in.Payload}})
					return err
				},
			}
			for name, call := range calls {
				err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return call(t.Context(), tx) })
				if !errors.Is(err, migrations.ErrPending) {
					t.Fatalf("%s on a database %s: %v; want an error matching migrations.ErrPending", name, tc.name, err)
				}
				if !strings.Contains(err.Error(), "sendonce migrate") || !strings.Contains(err.Error(), "migrations.Up") {
					t.Errorf("%s: %q does not name the fix (`sendonce migrate` or migrations.Up)", name, err)
				}
			}
		})
	}
}
