package sendstate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// setup gives an outbox and a scheduler over a fresh database, with email
// intents enqueued under the given keys.
func setup(t *testing.T, keys ...string) (*pgxpool.Pool, *outbox.Outbox, *sendstate.Scheduler) {
	t.Helper()
	pool, ob := outboxtest.New(t)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, ob, keys...)
	return pool, ob, &sendstate.Scheduler{Pool: pool, River: rc, Queue: outbox.DefaultQueue}
}

// setupJobs is setup with each intent given a River job of its own
// (outboxtest.GiveJobs), as a database upgraded from a release before the
// drain holds them (issue 44): the machinery that works such jobs (the
// per-job claims and marks, reconcile, the rescues) is tested with it.
func setupJobs(t *testing.T, keys ...string) (*pgxpool.Pool, *outbox.Outbox, *sendstate.Scheduler) {
	t.Helper()
	pool, ob, jobs := setup(t, keys...)
	if len(keys) > 0 {
		outboxtest.GiveJobs(t, pool, keys...)
	}
	return pool, ob, jobs
}

// path is a way an intent is sent: by a River job of its own (an intent
// of a database upgraded from a release before the drain) or by a drain
// (a job-less intent, claimed by ClaimDue). What a claim or a mark does
// on both is tested on both.
type path struct {
	name string
	// add enqueues intents under keys, each one claimable alone (claim).
	add func(t *testing.T, pool *pgxpool.Pool, keys ...string)
	// claim claims key as its own job, or its drain, does.
	claim func(t *testing.T, pool *pgxpool.Pool, key string) *sendstate.Claimed
	// job is key's job as an Outcome names it: 0 (none) for a drained one.
	job func(t *testing.T, pool *pgxpool.Pool, key string) int64
}

var paths = []path{
	{name: "job",
		add: func(t *testing.T, pool *pgxpool.Pool, keys ...string) {
			t.Helper()
			ob, err := outbox.New(pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			enqueue(t, pool, ob, keys...)
			outboxtest.GiveJobs(t, pool, keys...)
		},
		claim: claim,
		job:   func(t *testing.T, pool *pgxpool.Pool, key string) int64 { return request(t, pool, key).JobID }},
	{name: "drained",
		add: func(t *testing.T, pool *pgxpool.Pool, keys ...string) {
			t.Helper()
			for _, k := range keys {
				ob, err := outbox.New(pool, &outbox.Config{Queue: drainQueue(k)})
				if err != nil {
					t.Fatal(err)
				}
				enqueue(t, pool, ob, k)
				if rec := get(t, pool, k); rec.JobID != nil {
					t.Fatalf("%s has a River job: %+v; want a drained intent", k, rec)
				}
			}
		},
		claim: claimDrained,
		job:   func(*testing.T, *pgxpool.Pool, string) int64 { return 0 }},
}

// drainQueue is the queue of key's drained intent (path "drained"): one of
// its own, so that a claim of its drain claims it alone.
func drainQueue(key string) string {
	return "drain-" + strings.NewReplacer(":", "-").Replace(key)
}

// claimDrained claims key's drained intent as its drain does (ClaimDue of
// its queue), failing unless that claims it and nothing else.
func claimDrained(t *testing.T, pool *pgxpool.Pool, key string) *sendstate.Claimed {
	t.Helper()
	opts := claimOpts
	opts.Queue = drainQueue(key)
	claimed, err := sendstate.ClaimDue(context.Background(), pool, 10, opts)
	if err != nil || len(claimed) != 1 || claimed[0].Record.Key != key {
		t.Fatalf("ClaimDue in %s's queue = %v, %v; want %s claimed alone", key, claimed, err, key)
	}
	return &claimed[0].Claimed
}

// numbered is n keys prefix:first, prefix:first+1, and on.
func numbered(prefix string, first, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", prefix, first+i)
	}
	return keys
}

func enqueue(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, keys ...string) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		for _, k := range keys {
			if _, err := ob.Enqueue(context.Background(), tx, outbox.Intent{Key: k, Payload: json.RawMessage(outboxtest.InvoiceBody)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, pool *pgxpool.Pool, key string) *outbox.Record {
	t.Helper()
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return outboxtest.Get(t, ob, key)
}

func TestClaimManyAndMarkSentMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setupJobs(t, "m:1", "m:2", "m:3") // per-job claims, of an upgraded database
	claim(t, pool, "m:3")
	sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "m:3", MessageID: "msg_3"})

	reqs := []sendstate.ClaimRequest{request(t, pool, "m:1"), request(t, pool, "m:2"), request(t, pool, "m:3"), {Key: "m:missing", JobID: -1},
		{Key: "m:1", JobID: -2}} // a job that is not the intent's own claims nothing
	claimed, err := sendstate.ClaimMany(ctx, pool, reqs, claimOpts)
	if err != nil {
		t.Fatal(err)
	}
	m1, m2 := claimed[reqs[0].JobID], claimed[reqs[1].JobID]
	if len(claimed) != 2 || m1 == nil || m2 == nil || m1.Record.State != outbox.StateSending || m2.Record.Attempts != 1 ||
		m1.Record.FirstAttemptAt == nil || m1.WindowLeft < outbox.DefaultReplayWindow-time.Minute || m1.WindowLeft > outbox.DefaultReplayWindow {
		t.Fatalf("claimed %v, want m:1 and m:2 sending with a whole window left", claimed)
	}
	_, _, err = sendstate.MarkSentMany(ctx, pool, []sendstate.Sent{{Key: "m:1", MessageID: "msg_1"}, {Key: "m:2", MessageID: "msg_2", Replayed: true}})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"m:1": "msg_1", "m:2": "msg_2", "m:3": "msg_3"} {
		rec := get(t, pool, key)
		if rec.State != outbox.StateSent || rec.MessageID != want || rec.Replayed != (key == "m:2") || rec.SentAt == nil {
			t.Errorf("%s: %+v", key, rec)
		}
	}
}

var claimOpts = sendstate.ClaimOptions{ReplayWindow: outbox.DefaultReplayWindow, KeyFingerprint: "sha256:000000000001"}

// request is the claim the intent's own job would make.
func request(t *testing.T, pool *pgxpool.Pool, key string) sendstate.ClaimRequest {
	t.Helper()
	rec := get(t, pool, key)
	if rec.JobID == nil {
		t.Fatalf("%s has no job: %+v", key, rec)
	}
	return sendstate.ClaimRequest{Key: key, JobID: *rec.JobID}
}

// claim claims the intent as its own job would.
func claim(t *testing.T, pool *pgxpool.Pool, key string) *sendstate.Claimed {
	t.Helper()
	c, ok, err := sendstate.Claim(context.Background(), pool, request(t, pool, key), claimOpts)
	if err != nil || !ok {
		t.Fatalf("claim %s: %+v, %v, %v", key, c, ok, err)
	}
	return c
}

// fail parks the intent as its own job, or its drain, would.
func (p path) fail(t *testing.T, pool *pgxpool.Pool, key, reason string, uncertain bool) {
	t.Helper()
	err := sendstate.MarkFailed(context.Background(), pool, sendstate.Outcome{Key: key, JobID: p.job(t, pool, key), Reason: reason, Uncertain: uncertain})
	if err != nil {
		t.Fatal(err)
	}
}

// Hole 2: nothing moved an intent whose River job ended without it. The
// intents have jobs of their own, as a database upgraded from a release
// before the drain holds them; drained intents have none to lose.
func TestReconcile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys := []string{"s:discarded", "s:deleted", "s:cancelled", "s:live", "s:sent"}
	pool, _, jobs := setupJobs(t, keys...)
	// A drained intent beside them, sending, is not Reconcile's.
	ob, err := outbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, ob, "s:drained")
	claimDue(t, pool, 1, claimOpts)
	old := map[string]int64{}
	for _, k := range keys {
		old[k] = *get(t, pool, k).JobID
	}
	// (a) A River client that does not know sendonce's kind rescued the job
	// of a crashed worker and discarded it, leaving the intent sending.
	claim(t, pool, "s:discarded")
	pgtest.Exec(t, pool, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, old["s:discarded"])
	// (b) Deleted, and (c) cancelled, in the River UI.
	pgtest.Exec(t, pool, `DELETE FROM river_job WHERE id = $1`, old["s:deleted"])
	pgtest.Exec(t, pool, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, old["s:cancelled"])
	// A sent intent whose job completed is settled.
	claim(t, pool, "s:sent")
	if _, err := sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "s:sent", MessageID: "msg_1"}); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, old["s:sent"])

	n, err := jobs.Reconcile(ctx)
	if err != nil || n != 3 {
		t.Fatalf("Reconcile = %d, %v; want 3", n, err)
	}
	for _, k := range []string{"s:discarded", "s:deleted", "s:cancelled"} {
		rec := get(t, pool, k)
		if *rec.JobID == old[k] || jobState(t, pool, *rec.JobID) != "available" {
			t.Errorf("%s: job %d (was %d), want a new available job", k, *rec.JobID, old[k])
		}
	}
	if get(t, pool, "s:discarded").State != outbox.StateSending {
		t.Errorf("a rescued sending intent must stay sending, so its next claim marks it uncertain")
	}
	if rec := get(t, pool, "s:drained"); rec.State != outbox.StateSending || rec.JobID != nil {
		t.Errorf("s:drained: %+v, want left sending on its drain, with no job", rec)
	}
	for _, k := range []string{"s:live", "s:sent"} {
		if rec := get(t, pool, k); *rec.JobID != old[k] {
			t.Errorf("%s: job changed from %d to %d", k, old[k], *rec.JobID)
		}
	}
	if n, err := jobs.Reconcile(ctx); err != nil || n != 0 {
		t.Fatalf("second Reconcile = %d, %v; want 0", n, err)
	}
}

// Hole 3: a success recorded after another run parked the intent as failed
// was dropped, and a later retry sent it again. Of an intent's own job and
// of a drain alike.
func TestSentWinsOverFailed(t *testing.T) {
	t.Parallel()
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, ob, _ := setup(t)
			p.add(t, pool, "f:1")
			p.claim(t, pool, "f:1")
			p.fail(t, pool, "f:1", "409 conflict_error: request in progress", true)
			if rec := get(t, pool, "f:1"); rec.State != outbox.StateFailed {
				t.Fatalf("parked: %+v, want failed", rec)
			}
			overrode, err := sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "f:1", MessageID: "msg_9", Replayed: true})
			rec := get(t, pool, "f:1")
			if err != nil || !overrode || rec.State != outbox.StateSent || rec.MessageID != "msg_9" || !rec.Replayed {
				t.Fatalf("MarkSent over failed = %v, %v; intent %+v", overrode, err, rec)
			}
			if _, err := ob.Retry(ctx, "f:1", nil); err == nil {
				t.Fatal("a sent intent was retried")
			}
		})
	}
}

// Hole 4: the window is measured on the database's clock; the claim says
// how much of it is left. A job's claim and a drain's alike.
func TestClaimMeasuresTheWindowInTheDatabase(t *testing.T) {
	t.Parallel()
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			pool, _, _ := setup(t)
			p.add(t, pool, "c:w")
			p.claim(t, pool, "c:w")
			pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'pending', first_attempt_at = now() - interval '22 hours 59 minutes'`)
			c := p.claim(t, pool, "c:w")
			if c.WindowLeft <= 50*time.Second || c.WindowLeft > time.Minute {
				t.Fatalf("window left %s, want just under a minute", c.WindowLeft)
			}
			pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET state = 'pending', first_attempt_at = now() - interval '23 hours 1 second'`)
			if c := p.claim(t, pool, "c:w"); c.WindowLeft > 0 {
				t.Fatalf("window left %s, want none", c.WindowLeft)
			}
		})
	}
}

func jobState(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	return outboxtest.Value[string](t, pool, `SELECT state::text FROM river_job WHERE id = $1`, id)
}

// MarkSentMany reads whether a row was failed back from the last_error it
// writes (an UPDATE cannot return old values): only a failed row counts as
// overridden, not one that merely carries an earlier attempt's error, and
// a success clears that error as it always did. Of jobs' intents and
// drained ones alike.
func TestMarkSentManyTellsOverriddenFailures(t *testing.T) {
	t.Parallel()
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, _, _ := setup(t)
			p.add(t, pool, "o:retried", "o:failed", "o:pending")
			p.claim(t, pool, "o:retried")
			if err := sendstate.MarkPending(ctx, pool, sendstate.Outcome{Key: "o:retried", JobID: p.job(t, pool, "o:retried"),
				Reason: "503 server_error: try again", Uncertain: true}); err != nil {
				t.Fatal(err)
			}
			if rec := get(t, pool, "o:retried"); rec.State != outbox.StatePending || rec.LastError == "" {
				t.Fatalf("o:retried put back: %+v, want pending with its error", rec)
			}
			p.claim(t, pool, "o:retried")
			p.claim(t, pool, "o:failed")
			p.fail(t, pool, "o:failed", "gave up after 10 attempts", true)

			overrode, _, err := sendstate.MarkSentMany(ctx, pool, []sendstate.Sent{
				{Key: "o:retried", MessageID: "msg_r"}, {Key: "o:failed", MessageID: "msg_f"},
				{Key: "o:pending", MessageID: "msg_p"}, {Key: "o:missing", MessageID: "msg_m"}})
			if err != nil || len(overrode) != 1 || overrode[0] != "o:failed" {
				t.Fatalf("MarkSentMany = %v, %v; want [o:failed]", overrode, err)
			}
			if rec := get(t, pool, "o:retried"); rec.State != outbox.StateSent || rec.LastError != "" || !rec.Uncertain {
				t.Errorf("o:retried: %+v, want sent, last error cleared, still uncertain", rec)
			}
			if rec := get(t, pool, "o:failed"); rec.State != outbox.StateSent ||
				rec.LastError != "sent by an attempt that overlapped the one that parked it: gave up after 10 attempts" {
				t.Errorf("o:failed: %+v", rec)
			}
			if rec := get(t, pool, "o:pending"); rec.State != outbox.StateSent || rec.MessageID != "msg_p" {
				t.Errorf("o:pending: %+v", rec)
			}
		})
	}
}

// The check of what is sent runs after an update since migration 5 (a
// BEFORE trigger made every update of the worker lock its row first); it
// still refuses a bad change and lets a good one through.
func TestUpdateOfWhatIsSentIsChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			pool, _, _ := setup(t)
			p.add(t, pool, "u:1")
			_, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET payload = '{"from": "billing@example.com", "text": "hi"}' WHERE idempotency_key = 'u:1'`)
			if err == nil || !strings.Contains(err.Error(), `payload needs at least one recipient in "to"`) {
				t.Fatalf("update to a payload without recipients: %v", err)
			}
			pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET payload = $1 WHERE idempotency_key = 'u:1'`, outboxtest.InvoiceBody)
			p.claim(t, pool, "u:1") // the worker's own updates do not set those columns
			if _, err := sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "u:1", MessageID: "msg_u"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A claim and a mark find their rows by key, whatever the statistics say.
// Analysed while nothing was unsettled and then given a backlog, the
// planner drove a claim written with a plain state predicate from the
// index of unsettled intents: every batch read the whole backlog. Jobs'
// claims (ClaimMany, of an upgraded database's intents) find their rows by
// key; a drain's (ClaimDue) reads the due index. Neither, nor the mark,
// reads the index of unsettled intents.
func TestClaimAndMarkFindRowsByKeyAfterStaleStatistics(t *testing.T) {
	t.Parallel()
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, _, _ := setup(t)
			drained := p.name == "drained"
			ob, err := outbox.New(pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The drained path's intents in the default queue: the drain
			// claims them a hundred at a time, in due order.
			add := func(keys ...string) {
				enqueue(t, pool, ob, keys...)
				if !drained {
					outboxtest.GiveJobs(t, pool, keys...)
				}
			}
			add("p:0")
			if drained {
				claimDue(t, pool, 1, claimOpts)
			} else {
				claim(t, pool, "p:0")
			}
			if _, err := sendstate.MarkSent(ctx, pool, sendstate.Sent{Key: "p:0", MessageID: "msg_0"}); err != nil {
				t.Fatal(err)
			}
			pgtest.Exec(t, pool, `ANALYZE sendonce_outbox`)
			keys := numbered("p", 1, 2000)
			add(keys...)
			var reqs []sendstate.ClaimRequest
			var sent []sendstate.Sent
			for _, k := range keys[:100] {
				if !drained {
					reqs = append(reqs, request(t, pool, k))
				}
				sent = append(sent, sendstate.Sent{Key: k, MessageID: "msg_" + k})
			}

			// One connection of its own, whose statistics are flushed on demand.
			conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			scans := func(index string) int64 {
				if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
					t.Fatal(err)
				}
				return outboxtest.Value[int64](t, pool, `SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = $1`, index)
			}
			before, dueBefore := scans("sendonce_outbox_unsettled_idx"), scans("sendonce_outbox_tenant_due_idx")
			if drained {
				claimed, err := sendstate.ClaimDue(ctx, conn, len(sent), claimOpts)
				if err != nil || len(claimed) != len(sent) {
					t.Fatalf("ClaimDue = %d claims, %v; want %d", len(claimed), err, len(sent))
				}
				for i, c := range claimed {
					if c.Record.Key != sent[i].Key {
						t.Fatalf("claim %d is %s, want %s (due order)", i, c.Record.Key, sent[i].Key)
					}
				}
			} else if claimed, err := sendstate.ClaimMany(ctx, conn, reqs, claimOpts); err != nil || len(claimed) != len(reqs) {
				t.Fatalf("ClaimMany = %d claims, %v; want %d", len(claimed), err, len(reqs))
			}
			if _, _, err := sendstate.MarkSentMany(ctx, conn, sent); err != nil {
				t.Fatal(err)
			}
			if n := scans("sendonce_outbox_unsettled_idx") - before; n != 0 {
				t.Fatalf("the claim and the mark scanned the index of unsettled intents %d times, want none", n)
			}
			if n := scans("sendonce_outbox_tenant_due_idx") - dueBefore; drained && n == 0 {
				t.Fatalf("the drain's claim did not read the due index")
			}
			if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent'`); n != 101 {
				t.Fatalf("%d intents sent, want 101", n)
			}
		})
	}
}
