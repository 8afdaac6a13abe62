package migrations_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// versions is the number of sendonce migrations in sql/.
const versions = 32

func TestUpTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// pgtest's databases are cloned from a template that Up already
	// migrated, so a second run must find nothing to do.
	pool := pgtest.NewDB(t)
	res, err := migrations.Up(ctx, pool)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	if res.Applied() {
		t.Fatalf("second Up applied %+v, want nothing", res)
	}
	pending, err := migrations.Pending(ctx, pool)
	if err != nil || pending {
		t.Fatalf("Pending = %v, %v; want false, nil", pending, err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+migrations.TableName+" WHERE version_id > 0").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != versions {
		t.Fatalf("%d sendonce versions recorded, want %d", n, versions)
	}
}

func TestPendingOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	if _, err := pool.Exec(ctx, "DROP TABLE sendonce_outbox; DROP FUNCTION sendonce_outbox_check, sendonce_outbox_notify, sendonce_check_email, sendonce_is_timestamp; DROP SEQUENCE sendonce_worker_id_seq; DROP TABLE sendonce_worker; DROP TABLE sendonce_rate_budget; DROP TABLE sendonce_rate_quota; DROP TABLE sendonce_batch; DROP TABLE sendonce_run_outcome; DROP FUNCTION sendonce_run_breaker; DROP TABLE sendonce_run; DROP TABLE sendonce_schedule; DROP TABLE sendonce_event; DROP TABLE sendonce_suppression; DROP TABLE sendonce_suppression_change; DROP TABLE sendonce_unsubscribe, sendonce_unsubscribe_event; DROP FUNCTION sendonce_run_topic; DROP FUNCTION sendonce_run_tenant, sendonce_run_tenant_fixed; DROP FUNCTION sendonce_suppressed_addresses; DROP FUNCTION sendonce_event_match, sendonce_event_suppress; DROP TABLE sendonce_tombstone; DROP FUNCTION sendonce_address; DROP FUNCTION sendonce_outbox_snapshot, sendonce_outbox_run_member; DROP TABLE sendonce_outbox_tally, sendonce_run_tally; DROP FUNCTION sendonce_outbox_tally, sendonce_outbox_tally_truncate, sendonce_tally_compact, sendonce_outbox_run_key_moved; DROP FUNCTION sendonce_status_changes, sendonce_status_hook_enable, sendonce_status_hook_disable; DROP TYPE sendonce_status; DROP FUNCTION sendonce_scope_breaker, sendonce_run_held; DROP TABLE sendonce_breaker, sendonce_breaker_state, sendonce_breaker_outcome; DROP TABLE "+migrations.TableName); err != nil {
		t.Fatal(err)
	}
	pending, err := migrations.Pending(ctx, pool)
	if err != nil || !pending {
		t.Fatalf("Pending = %v, %v; want true, nil", pending, err)
	}
	res, err := migrations.Up(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sendonce) != versions {
		t.Fatalf("Up applied %v, want the %d sendonce migrations", res.Sendonce, versions)
	}
}

// TestRetiredVersionsAreTheGaps: the versions in sql/ and RetiredVersions
// together are 1 to the newest, each once, so a gap in the numbers
// (which `sendonce migrate` explains with RetiredVersions) is always one
// the list names, and the list names no version in use.
func TestRetiredVersionsAreTheGaps(t *testing.T) {
	names, err := filepath.Glob("sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	var newest int64
	for _, name := range names {
		v, err := strconv.ParseInt(strings.SplitN(filepath.Base(name), "_", 2)[0], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		seen[v]++
		newest = max(newest, v)
	}
	for _, v := range migrations.RetiredVersions {
		seen[v]++
	}
	for v := int64(1); v <= newest; v++ {
		if seen[v] != 1 {
			t.Errorf("version %d: %d times in sql/ and RetiredVersions, want once", v, seen[v])
		}
	}
}
