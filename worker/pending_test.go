package worker_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/migrations"
	"github.com/sendonce/sendonce/worker"
)

// TestNewUnmigrated: worker.New on a database never migrated, or migrated
// for River only, refuses with migrations.ErrPending (the fix in its text)
// instead of failing later, at Start, on a missing sequence.
func TestNewUnmigrated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		river bool
		older bool // the newest sendonce migration not applied yet
	}{{"empty", false, false}, {"river-only", true, false}, {"older-sendonce", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var pool *pgxpool.Pool
			if tc.older {
				pool = pgtest.NewDB(t)
				pgtest.Exec(t, pool, `DELETE FROM `+migrations.TableName+` WHERE version_id = (SELECT max(version_id) FROM `+migrations.TableName+`)`)
			} else {
				var err error
				if pool, err = pgxpool.New(ctx, pgtest.CreateDB(t, pgtest.ServerURL(t), "unmigrated")); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
			}
			if tc.river {
				m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
					t.Fatal(err)
				}
			}
			c, err := client.New(client.WithAPIKey("oe_test_unmigrated00000000"), client.WithBaseURL("http://127.0.0.1:1"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = worker.New(pool, &worker.Config{Client: c})
			if !errors.Is(err, migrations.ErrPending) {
				t.Fatalf("worker.New on a database %s: %v; want an error matching migrations.ErrPending", tc.name, err)
			}
		})
	}
}
