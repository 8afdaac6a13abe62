package sendstate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// Issue 26: the counts Stats, the runs and the chart read come from the
// tally the outbox's statement triggers keep, and agree with a count(*)
// of the table after any mix of state changes: enqueues (committed and
// rolled back), claims, marks of every outcome, delivery statuses, retries,
// cancels, a lapsed worker's intents rescued, prunes and compactions. The
// intents are drained ones and, as a database upgraded from a release
// before the drain holds, ones with River jobs of their own.
func TestTallyAgreesWithCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 26))
	pool, ob, jobs := setup(t)
	var keys []string
	next := 0
	enqueueSome := func(run string, commit bool) {
		var in []outbox.Intent
		for range 1 + rng.IntN(6) {
			next++
			k := fmt.Sprintf("t:%d", next)
			in = append(in, outbox.Intent{Key: k, Payload: json.RawMessage(outboxtest.InvoiceBody)})
			if commit {
				keys = append(keys, k)
			}
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if run != "" {
			_, err = ob.EnqueueRun(ctx, tx, outbox.Run{Key: run, Intents: in})
		} else {
			_, err = ob.EnqueueMany(ctx, tx, in)
		}
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(2) == 0 {
				var ks []string
				for _, in := range in {
					ks = append(ks, in.Key)
				}
				outboxtest.GiveJobs(t, pool, ks...)
			}
		}
	}
	pickWhere := func(cond string, states ...string) []string {
		rows, err := pool.Query(ctx, `SELECT idempotency_key FROM sendonce_outbox WHERE state = ANY($1) AND `+cond+` ORDER BY random() LIMIT $2`, states, 1+rng.IntN(5))
		if err != nil {
			t.Fatal(err)
		}
		ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	pick := func(states ...string) []string { return pickWhere("true", states...) }
	lease := takeLease(t, pool, "tally")
	pruned := 0
	ops := []func(){
		func() { enqueueSome("", true) },
		func() { enqueueSome(fmt.Sprintf("run-%d", rng.IntN(3)), true) },
		func() { enqueueSome("", false) },
		func() {
			var reqs []sendstate.ClaimRequest
			for _, k := range pickWhere("job_id IS NOT NULL", "pending") {
				reqs = append(reqs, request(t, pool, k))
			}
			opts := claimOpts
			opts.Owner = lease.Epoch
			if _, err := sendstate.ClaimMany(ctx, pool, reqs, opts); err != nil {
				t.Fatal(err)
			}
		},
		func() {
			opts := claimOpts
			opts.Owner = lease.Epoch
			if _, err := sendstate.ClaimDue(ctx, pool, 1+rng.IntN(5), opts); err != nil {
				t.Fatal(err)
			}
		},
		func() {
			var sent []sendstate.Sent
			for _, k := range pick("sending", "failed") {
				sent = append(sent, sendstate.Sent{Key: k, MessageID: "m-" + k})
			}
			mark := sendstate.MarkSentMany
			if rng.IntN(2) == 0 {
				mark = sendstate.MarkSentManyAsyncCommit
			}
			if _, _, err := mark(ctx, pool, sent); err != nil {
				t.Fatal(err)
			}
		},
		func() {
			// The drain's round: its answers and its next claims in one
			// transaction, and then an update the trigger tallies (the
			// hot statements keep the tallies themselves; the trigger
			// stands aside for them alone).
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var sent []sendstate.Sent
				for _, k := range pick("sending", "failed") {
					sent = append(sent, sendstate.Sent{Key: k, MessageID: "m-" + k})
				}
				if _, _, err := sendstate.MarkSentMany(ctx, tx, sent); err != nil {
					return err
				}
				opts := claimOpts
				opts.Owner = lease.Epoch
				if _, err := sendstate.ClaimDue(ctx, tx, 1+rng.IntN(5), opts); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE sendonce_outbox SET delivery_status = 'delivered', delivery_status_at = now()
					WHERE idempotency_key = ANY($1)`, pick("sent"))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		},
		func() {
			for _, k := range pick("sending") {
				r := get(t, pool, k)
				o := sendstate.Outcome{Key: k, Reason: "no"} // a drained intent's names no job
				if r.JobID != nil {
					o.JobID = *r.JobID
				}
				var err error
				switch rng.IntN(3) {
				case 0:
					err = sendstate.MarkFailed(ctx, pool, o)
				case 1:
					err = sendstate.MarkPending(ctx, pool, o)
				default:
					err = sendstate.MarkSuppressed(ctx, pool, o)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		},
		func() {
			pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET delivery_status = (ARRAY['delivered', 'bounced', 'complained'])[1 + floor(random() * 3)::int],
				delivery_status_at = now() WHERE idempotency_key = ANY($1)`, pick("sent"))
		},
		func() {
			for _, k := range pick("failed", "suppressed") {
				if _, err := ob.Retry(ctx, k, &outbox.RetryOptions{Force: true}); err != nil {
					t.Logf("retry %s: %v", k, err)
				}
			}
		},
		func() {
			for _, k := range pick("pending") {
				if _, err := ob.Cancel(ctx, k); err != nil {
					t.Logf("cancel %s: %v", k, err)
				}
			}
		},
		func() {
			// The worker holding the claims lapses; a sweeper rescues them.
			lapse(t, pool, lease)
			if _, err := jobs.ExpireLeases(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := jobs.RescueAbandoned(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := sendstate.RescueDrained(ctx, pool, 0); err != nil {
				t.Fatal(err)
			}
			lease = takeLease(t, pool, "tally")
		},
		func() {
			// Prune reads ids below the first created after its cutoff.
			pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET created_at = now() - interval '2 days'`)
			pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET updated_at = now() - interval '2 days'
				WHERE idempotency_key = ANY($1) AND state NOT IN ('pending', 'sending')`, pick("sent", "failed", "canceled", "suppressed"))
			pgtest.Exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE state <> 'completed'
				AND id IN (SELECT job_id FROM sendonce_outbox WHERE state NOT IN ('pending', 'sending'))`)
			res, err := sendstate.Prune(ctx, pool, sendstate.PruneOptions{Retain: 24 * time.Hour, BatchSize: 3})
			if err != nil {
				t.Fatal(err)
			}
			pruned += res.Intents
		},
		func() {
			if _, err := sendstate.CompactTally(ctx, pool); err != nil {
				t.Fatal(err)
			}
		},
	}
	for i := range 400 {
		ops[rng.IntN(len(ops))]()
		if i%40 == 39 {
			checkTally(t, pool, ob, i)
		}
	}
	checkTally(t, pool, ob, 400)
	if _, err := sendstate.CompactTally(ctx, pool); err != nil {
		t.Fatal(err)
	}
	checkTally(t, pool, ob, 401)
	if pruned == 0 {
		t.Errorf("no prune deleted anything: the mix did too little")
	}
	if n := count(t, pool, `SELECT count(*) FROM sendonce_outbox`); n < 50 {
		t.Errorf("only %d intents at the end: the mix did too little", n)
	}
}

// checkTally compares what Stats, RunStatus and the tally's minutes say
// with a count(*) of the table.
func checkTally(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, step int) {
	t.Helper()
	ctx := context.Background()
	st, err := ob.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := &outbox.Stats{Counts: map[outbox.State]int64{}, Deliveries: map[outbox.DeliveryStatus]int64{}}
	for _, s := range outbox.States {
		want.Counts[s] = int64(count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = $1`, string(s)))
	}
	for _, d := range outbox.DeliveryStatuses {
		want.Deliveries[d] = int64(count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE delivery_status = $1`, string(d)))
	}
	if fmt.Sprint(st.Counts, st.Deliveries) != fmt.Sprint(want.Counts, want.Deliveries) {
		t.Fatalf("step %d: Stats %v %v, count(*) %v %v", step, st.Counts, st.Deliveries, want.Counts, want.Deliveries)
	}
	for r := range 3 {
		key := fmt.Sprintf("run-%d", r)
		rs, err := ob.RunStatus(ctx, key)
		if err != nil {
			continue // not enqueued yet, or pruned
		}
		got := map[string]int64{}
		for s, n := range rs.Counts {
			if n != 0 {
				got[string(s)] = n
			}
		}
		exp := map[string]int64{}
		rows, err := pool.Query(ctx, `SELECT state, count(*) FROM sendonce_outbox WHERE run_key = $1 GROUP BY 1`, key)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			var n int64
			if err := rows.Scan(&s, &n); err != nil {
				t.Fatal(err)
			}
			exp[s] = n
		}
		rows.Close()
		recent := int64(count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE run_key = $1 AND sent_at > now() - interval '1 minute'`, key))
		if fmt.Sprint(got) != fmt.Sprint(exp) || rs.SentLastMinute != recent {
			t.Fatalf("step %d: run %s counts %v (%d sent in the last minute), count(*) %v (%d)", step, key, got, rs.SentLastMinute, exp, recent)
		}
	}
	var chart, sent int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::bigint FROM sendonce_outbox_tally
		WHERE state = 'sent' AND minute >= date_trunc('minute', now()) - interval '59 minutes'`).Scan(&chart); err != nil {
		t.Fatal(err)
	}
	sent = int64(count(t, pool, `SELECT count(*) FROM sendonce_outbox WHERE state = 'sent' AND sent_at >= date_trunc('minute', now()) - interval '59 minutes'`))
	if chart != sent {
		t.Fatalf("step %d: the chart's last hour holds %d sends, count(*) %d", step, chart, sent)
	}
}

// Issue 44: the drain's claim appends nothing to the tallies (migration
// 00028), nor does any other move between pending and sending (a retry
// recorded, an orphan released), and the counts stay exact while intents
// are sending: Stats and the runs count the sending ones from the table.
// The mark appends its deltas as before.
func TestClaimAppendsNoTally(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ob, _ := setup(t, "lean:1", "lean:2")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.EnqueueRun(ctx, tx, outbox.Run{Key: "run-0", Intents: []outbox.Intent{
		{Key: "lean:3", Payload: json.RawMessage(outboxtest.InvoiceBody)},
		{Key: "lean:4", Payload: json.RawMessage(outboxtest.InvoiceBody)},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	appended := func() int {
		return count(t, pool, `SELECT (SELECT count(*) FROM sendonce_outbox_tally) + (SELECT count(*) FROM sendonce_run_tally)`)
	}
	lease := takeLease(t, pool, "lean")
	opts := claimOpts
	opts.Owner = lease.Epoch
	before := appended()
	claimed, err := sendstate.ClaimDue(ctx, pool, 4, opts)
	if err != nil || len(claimed) != 4 {
		t.Fatalf("ClaimDue = %d claims, %v; want 4", len(claimed), err)
	}
	if n := appended() - before; n != 0 {
		t.Errorf("the claim appended %d tally rows, want none", n)
	}
	checkTally(t, pool, ob, 0)
	if err := sendstate.MarkPending(ctx, pool, sendstate.Outcome{Key: "lean:4", Reason: "503", Owner: lease.Epoch}); err != nil {
		t.Fatal(err)
	}
	if n := appended() - before; n != 0 {
		t.Errorf("the claim and a retry recorded appended %d tally rows, want none", n)
	}
	checkTally(t, pool, ob, 1)
	var sent []sendstate.Sent
	for _, k := range []string{"lean:1", "lean:2", "lean:3"} {
		sent = append(sent, sendstate.Sent{Key: k, MessageID: "m-" + k, Owner: lease.Epoch})
	}
	if _, _, err := sendstate.MarkSentMany(ctx, pool, sent); err != nil {
		t.Fatal(err)
	}
	if n := appended() - before; n == 0 {
		t.Errorf("the mark appended no tally rows")
	}
	checkTally(t, pool, ob, 2)
	if _, err := sendstate.CompactTally(ctx, pool); err != nil {
		t.Fatal(err)
	}
	checkTally(t, pool, ob, 3)
}

// The trigger's early return for a move between pending and sending must
// not skip a statement that moves an unsettled intent into another run
// (plain SQL may): the run's counts stay exact.
func TestRunKeyMovedIsTallied(t *testing.T) {
	t.Parallel()
	pool, ob, _ := setup(t, "moved:1", "moved:2")
	pgtest.Exec(t, pool, `INSERT INTO sendonce_run (key) VALUES ('run-1'), ('run-2')`)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET run_key = 'run-1' WHERE idempotency_key LIKE 'moved:%'`)
	checkTally(t, pool, ob, 0)
	pgtest.Exec(t, pool, `UPDATE sendonce_outbox SET run_key = 'run-2' WHERE idempotency_key = 'moved:2'`)
	checkTally(t, pool, ob, 1)
}

// Issue 44's lean hot path: the drain's claim and its mark of sent intents
// keep the tallies themselves, and the tally's statement trigger does not
// run for them; the next update of the same transaction, which does not
// keep them, runs it as before. Counted by PostgreSQL itself
// (track_functions, pg_stat_xact_user_functions).
func TestHotPathRunsNoTallyTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t, "hot:1", "hot:2")
	lease := takeLease(t, pool, "hot")
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET track_functions = 'pl'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "RESET track_functions")
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	calls := func() int64 {
		t.Helper()
		var n int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_xact_user_functions
			WHERE funcname = 'sendonce_outbox_tally'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	opts := claimOpts
	opts.Owner = lease.Epoch
	claimed, err := sendstate.ClaimDue(ctx, tx, 2, opts)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %d claimed, %v", len(claimed), err)
	}
	if n := calls(); n != 0 {
		t.Fatalf("the claim of due intents ran the tally trigger %d times, want 0", n)
	}
	sent := []sendstate.Sent{{Key: "hot:1", MessageID: "m-1", Owner: lease.Epoch}, {Key: "hot:2", MessageID: "m-2", Owner: lease.Epoch}}
	if _, notOwned, err := sendstate.MarkSentMany(ctx, tx, sent); err != nil || len(notOwned) > 0 {
		t.Fatalf("mark: not owned %v, %v", notOwned, err)
	}
	if n := calls(); n != 0 {
		t.Fatalf("the mark of sent intents ran the tally trigger %d times, want 0", n)
	}
	if _, err := tx.Exec(ctx, `UPDATE sendonce_outbox SET delivery_status = 'delivered' WHERE idempotency_key = 'hot:1'`); err != nil {
		t.Fatal(err)
	}
	if n := calls(); n != 1 {
		t.Fatalf("an update after them ran the tally trigger %d times, want 1", n)
	}
	var sentTally, deliveredTally int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(n) FILTER (WHERE state = 'sent'), 0)::int8,
		coalesce(sum(n) FILTER (WHERE delivery_status = 'delivered'), 0)::int8 FROM sendonce_outbox_tally`).Scan(&sentTally, &deliveredTally); err != nil {
		t.Fatal(err)
	}
	if sentTally != 2 || deliveredTally != 1 {
		t.Fatalf("tally: %d sent, %d delivered; want 2 and 1", sentTally, deliveredTally)
	}
}

// A lone mark commits without waiting for the WAL flush; a mark that
// shares its transaction (the drain's round, with its claims) does not
// change how it commits.
func TestMarkSentAsyncCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := setup(t, "async:1", "async:2", "async:3")
	// A success over a failed intent waits for the flush all the same:
	// lost to a crash, it would leave the intent failed, its email sent.
	if err := sendstate.MarkFailed(context.Background(), pool, sendstate.Outcome{Key: "async:3", Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		mark func(context.Context, sendstate.DB, []sendstate.Sent) ([]string, []string, error)
		want string
	}{
		{"async:1", sendstate.MarkSentMany, "on"},
		{"async:2", sendstate.MarkSentManyAsyncCommit, "off"},
		{"async:3", sendstate.MarkSentManyAsyncCommit, "on"},
	} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// The test server may run with it off for every transaction.
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
				return err
			}
			if _, _, err := c.mark(ctx, tx, []sendstate.Sent{{Key: c.key, MessageID: "m"}}); err != nil {
				return err
			}
			var got string
			if err := tx.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&got); err != nil {
				return err
			}
			if got != c.want {
				t.Errorf("%s: synchronous_commit %q after the mark, want %q", c.key, got, c.want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if r := get(t, pool, c.key); r.State != "sent" {
			t.Errorf("%s: %s after the mark, want sent", c.key, r.State)
		}
	}
}
