package sendstate_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// insertRow inserts a job-less intent by plain SQL with the given columns
// besides its key (an email of outboxtest.InvoiceBody unless they say
// otherwise).
func insertRow(t *testing.T, pool *pgxpool.Pool, key string, cols map[string]any) {
	t.Helper()
	names, vals, args := "idempotency_key", "$1", []any{key}
	if _, ok := cols["kind"]; !ok {
		cols["kind"] = "email"
	}
	if _, ok := cols["payload"]; !ok {
		cols["payload"] = outboxtest.InvoiceBody
	}
	for name, v := range cols {
		args = append(args, v)
		names += ", " + name
		vals += ", $" + string(rune('0'+len(args)))
	}
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (`+names+`) VALUES (`+vals+`)`, args...)
}

// frozenBatch is a batch as FreezeDue left it.
type frozenBatch struct {
	queue, run string
	members    []string
	jobID      int64
}

// frozenBatches reads the batches by their first member.
func frozenBatches(t *testing.T, pool *pgxpool.Pool) map[string]frozenBatch {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT b.queue, coalesce(b.run_key, ''), b.member_keys, b.job_id, j.kind, j.queue
		FROM sendonce_batch b JOIN river_job j ON j.id = b.job_id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]frozenBatch{}
	var b frozenBatch
	var kind, jobQueue string
	if _, err := pgx.ForEachRow(rows, []any{&b.queue, &b.run, &b.members, &b.jobID, &kind, &jobQueue}, func() error {
		if kind != "sendonce_batch" || jobQueue != b.queue {
			t.Errorf("batch of %v: a %s job on queue %s, want a sendonce_batch job on %s", b.members, kind, jobQueue, b.queue)
		}
		members := slices.Clone(b.members)
		slices.Sort(members)
		out[members[0]] = frozenBatch{queue: b.queue, run: b.run, members: members, jobID: b.jobID}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFreezeDue: the drain's due email intents are frozen into batches, one
// per queue and run, and the rows name the batch and its job; an intent
// that may not join (suppressed, attempted, a template, not due, of a
// paused run, of another queue, with a topic and no signer, alone in its
// run) is left to the drain, as it was.
func TestFreezeDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob, jobs := setup(t)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key) VALUES ('digest'), ('weekly'), ('paused')`)
	for _, k := range []string{"tx:1", "tx:2", "tx:3"} {
		insertRow(t, pool, k, map[string]any{})
	}
	for _, k := range []string{"digest:1", "digest:2"} {
		insertRow(t, pool, k, map[string]any{"run_key": "digest"})
	}
	for _, k := range []string{"paused:1", "paused:2"} {
		insertRow(t, pool, k, map[string]any{"run_key": "paused"})
	}
	for _, k := range []string{"other:1", "other:2"} {
		insertRow(t, pool, k, map[string]any{"queue": "other"})
	}
	insertRow(t, pool, "weekly:1", map[string]any{"run_key": "weekly"})
	insertRow(t, pool, "tx:gone", map[string]any{"payload": `{"from":"billing@example.com","to":["gone@example.com"],"subject":"Invoice","text":"x"}`})
	insertRow(t, pool, "tx:tried", map[string]any{})
	insertRow(t, pool, "tx:later", map[string]any{"send_at": time.Now().Add(time.Hour)})
	insertRow(t, pool, "tx:topic", map[string]any{"topic": "news"})
	insertRow(t, pool, "tx:template", map[string]any{"kind": "template", "template_id": "welcome",
		"payload": `{"from":"hi@example.com","to":["new@example.com"]}`})
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET attempts = 1, first_attempt_at = now(), next_attempt_at = now() - interval '1 second'
		WHERE idempotency_key = 'tx:tried'`)
	pgtest.Exec(t, pool, `UPDATE sendonce_run SET state = 'paused' WHERE key = 'paused'`)
	if _, err := ob.Suppress(ctx, []string{"gone@example.com"}, "test"); err != nil {
		t.Fatal(err)
	}

	b := &sendstate.Batcher{Pool: pool, River: jobs.River}
	res, err := b.FreezeDue(ctx, "", 100, 0)
	if err != nil || res != (sendstate.FrozenDue{Batches: 2, Members: 5}) {
		t.Fatalf("FreezeDue = %+v, %v; want 2 batches of 5 members, nothing more", res, err)
	}
	got := frozenBatches(t, pool)
	want := map[string]frozenBatch{
		"digest:1": {queue: outbox.DefaultQueue, run: "digest", members: []string{"digest:1", "digest:2"}},
		"tx:1":     {queue: outbox.DefaultQueue, members: []string{"tx:1", "tx:2", "tx:3"}},
	}
	if len(got) != len(want) {
		t.Fatalf("batches %+v, want %+v", got, want)
	}
	for first, w := range want {
		g := got[first]
		if g.queue != w.queue || g.run != w.run || !slices.Equal(g.members, w.members) {
			t.Errorf("batch of %s: %+v, want %+v", first, g, w)
		}
		for _, m := range g.members {
			var state string
			var jobID int64
			var batch string
			if err := pool.QueryRow(ctx, `SELECT state, job_id, batch_key FROM sendonce_outbox WHERE idempotency_key = $1`, m).
				Scan(&state, &jobID, &batch); err != nil {
				t.Fatal(err)
			}
			key := outboxtest.Value[string](t, pool, `SELECT idempotency_key FROM sendonce_batch WHERE job_id = $1`, g.jobID)
			if state != "pending" || jobID != g.jobID || batch != key {
				t.Errorf("%s: %s, job %d, batch %s; want pending, bound to batch %s and its job %d", m, state, jobID, batch, key, g.jobID)
			}
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE batch_key IS NULL AND job_id IS NULL AND state = 'pending'`); n != 10 {
		t.Errorf("%d intents left to the drain, want the 10 that may not join", n)
	}

	// Another queue's are its drain's to freeze.
	if res, err := b.FreezeDue(ctx, "other", 100, 0); err != nil || res != (sendstate.FrozenDue{Batches: 1, Members: 2}) {
		t.Fatalf("FreezeDue of queue other = %+v, %v; want its 2 intents in 1 batch", res, err)
	}
	if g := frozenBatches(t, pool)["other:1"]; g.queue != "other" || !slices.Equal(g.members, []string{"other:1", "other:2"}) {
		t.Errorf("queue other's batch: %+v", g)
	}
	// Nothing is frozen twice.
	if res, err := b.FreezeDue(ctx, "", 100, 0); err != nil || res != (sendstate.FrozenDue{}) {
		t.Fatalf("FreezeDue again = %+v, %v; want nothing", res, err)
	}
}

// TestFreezeDueWaitsToFill: a full batch is frozen at once; a partial one,
// and an intent alone, wait until the coalesce wait has passed since the
// oldest came due, and the claim holds them that long (a template is not
// held). Then the partial batch is frozen, and the lone intent is claimed.
func TestFreezeDueWaitsToFill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setup(t)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key) VALUES ('digest')`)
	b := &sendstate.Batcher{Pool: pool, River: jobs.River}
	const wait = time.Hour
	for _, k := range []string{"a:1", "a:2", "a:3", "a:4", "a:5"} {
		insertRow(t, pool, k, map[string]any{})
	}
	res, err := b.FreezeDue(ctx, "", 2, wait)
	if err != nil || res.Batches != 2 || res.Members != 4 || res.NextIn <= wait-time.Minute || res.NextIn > wait+sendstate.CoalesceGrace {
		t.Fatalf("FreezeDue = %+v, %v; want the two full batches of 2, and a:5 held about an hour", res, err)
	}
	insertRow(t, pool, "digest:1", map[string]any{"run_key": "digest"})
	insertRow(t, pool, "digest:2", map[string]any{"run_key": "digest"})
	insertRow(t, pool, "tpl:1", map[string]any{"kind": "template", "template_id": "welcome",
		"payload": `{"from":"hi@example.com","to":["new@example.com"]}`})
	if res, err := b.FreezeDue(ctx, "", 10, wait); err != nil || res.Batches != 0 || res.NextIn <= 0 {
		t.Fatalf("FreezeDue = %+v, %v; want nothing frozen within the wait, and a time to look again", res, err)
	}
	held := claimOpts
	held.CoalesceWait = wait
	if got := claimDue(t, pool, 10, held); !equal(got, "tpl:1") {
		t.Fatalf("claim within the wait: %v, want the template alone: the emails are held", got)
	}
	if due, err := sendstate.AnyDue(ctx, pool, "", wait); err != nil || due {
		t.Fatalf("AnyDue within the wait = %v, %v; want false", due, err)
	}
	if due, err := sendstate.AnyDue(ctx, pool, "", 0); err != nil || !due {
		t.Fatalf("AnyDue without coalescing = %v, %v; want true", due, err)
	}

	// The wait has passed: the pair is frozen, a:5 is claimed alone.
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET created_at = now() - interval '2 hours' WHERE idempotency_key IN ('digest:1', 'digest:2', 'a:5')`)
	if res, err := b.FreezeDue(ctx, "", 10, wait); err != nil || res != (sendstate.FrozenDue{Batches: 1, Members: 2}) {
		t.Fatalf("FreezeDue past the wait = %+v, %v; want the run's pair frozen, a:5 left alone", res, err)
	}
	if due, err := sendstate.AnyDue(ctx, pool, "", wait); err != nil || !due {
		t.Fatalf("AnyDue past the wait = %v, %v; want true", due, err)
	}
	if got := claimDue(t, pool, 10, held); !equal(got, "a:5") {
		t.Fatalf("claim past the wait: %v, want a:5 alone", got)
	}
}

// TestFreezeDueMore: one call reads a bounded number of intents and says
// when more may be frozen at once; a second call freezes the rest.
func TestFreezeDueMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, jobs := setup(t)
	pgtest.Exec(t, pool, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload)
		SELECT 'bulk:' || i, 'email', $1::jsonb FROM generate_series(1, 600) AS i`, outboxtest.InvoiceBody)
	b := &sendstate.Batcher{Pool: pool, River: jobs.River}
	if res, err := b.FreezeDue(ctx, "", 100, 0); err != nil || res != (sendstate.FrozenDue{Batches: 5, Members: 500, More: true}) {
		t.Fatalf("first FreezeDue = %+v, %v; want 5 batches of 100, and more", res, err)
	}
	if res, err := b.FreezeDue(ctx, "", 100, 0); err != nil || res != (sendstate.FrozenDue{Batches: 1, Members: 100}) {
		t.Fatalf("second FreezeDue = %+v, %v; want the last 100, and no more", res, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE batch_key IS NULL`); n != 0 {
		t.Fatalf("%d intents in no batch, want none", n)
	}
}
