package sendstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// fromStates are the states a case puts a row in before its statement
// runs: every state, and no row at all.
var fromStates = append([]outbox.State{sendstate.NoRow}, outbox.States...)

// stateName is a state as the table's readers see it.
func stateName(s outbox.State) string {
	if s == sendstate.NoRow {
		return "(no row)"
	}
	return string(s)
}

// transitionLogSQL records every change of an intent's state as the
// database sees it: each statement that sets the column (UPDATE OF state
// fires even when the state it sets is the one the row had), each insert
// and each delete. It observes; it changes nothing.
const transitionLogSQL = `
	CREATE TABLE transition_log (n bigserial PRIMARY KEY, key text NOT NULL, old_state text NOT NULL, new_state text NOT NULL);
	CREATE FUNCTION transition_log() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP = 'INSERT' THEN
			INSERT INTO transition_log (key, old_state, new_state) VALUES (NEW.idempotency_key, '', NEW.state);
		ELSIF TG_OP = 'DELETE' THEN
			INSERT INTO transition_log (key, old_state, new_state) VALUES (OLD.idempotency_key, OLD.state, '');
		ELSE
			INSERT INTO transition_log (key, old_state, new_state) VALUES (NEW.idempotency_key, OLD.state, NEW.state);
		END IF;
		RETURN NULL;
	END $$;
	CREATE TRIGGER transition_log AFTER INSERT OR DELETE OR UPDATE OF state ON sendonce_outbox
		FOR EACH ROW EXECUTE FUNCTION transition_log();`

// stateEnv is a fresh database for one case: a row per state (keys), a
// held lease (the owner of every claim and record), and a frozen batch
// when the case binds the rows into one.
type stateEnv struct {
	pool    *pgxpool.Pool
	ob      *outbox.Outbox
	jobs    *sendstate.Scheduler
	batcher *sendstate.Batcher
	lease   sendstate.Lease
	keys    map[outbox.State]string
	job     map[string]int64 // each row's River job, read after the rows were made
}

const (
	testBatch    = "sendonce-batch:states"
	testBatchJob = int64(900001)
	testRun      = "states-run"
)

func newStateEnv(t *testing.T) *stateEnv {
	t.Helper()
	pool, ob, jobs := setup(t)
	pgtest.Exec(t, pool, transitionLogSQL)
	e := &stateEnv{pool: pool, ob: ob, jobs: jobs, batcher: &sendstate.Batcher{Pool: pool, River: jobs.River},
		lease: takeLease(t, pool, "worker"), keys: map[outbox.State]string{}, job: map[string]int64{}}
	e.keys[sendstate.NoRow] = "t:none"
	for _, s := range outbox.States {
		e.keys[s] = "t:" + string(s)
	}
	return e
}

// rowKeys are the keys that get a row: every state's but NoRow's.
func (e *stateEnv) rowKeys() []string {
	var keys []string
	for _, s := range outbox.States {
		keys = append(keys, e.keys[s])
	}
	return keys
}

// allKeys are every state's keys, NoRow's too.
func (e *stateEnv) allKeys() []string {
	return append([]string{e.keys[sendstate.NoRow]}, e.rowKeys()...)
}

// opts are the options of a claim under the env's lease.
func (e *stateEnv) opts() sendstate.ClaimOptions {
	o := claimOpts
	o.Owner = e.lease.Epoch
	return o
}

// outcome is an outcome of key's own job under the lease.
func (e *stateEnv) outcome(key string) sendstate.Outcome {
	return sendstate.Outcome{Key: key, JobID: e.job[key], Reason: "503 unavailable", Owner: e.lease.Epoch}
}

// deadLease is the epoch of a lease that has ended, as a sweeper ends a
// lapsed one.
func (e *stateEnv) deadLease(t *testing.T) int32 {
	t.Helper()
	l := leaseWithClient(t, e.pool, "dead")
	lapse(t, e.pool, l)
	if n, err := e.jobs.ExpireLeases(context.Background(), 0); err != nil || n != 1 {
		t.Fatalf("ExpireLeases = %d, %v; want 1", n, err)
	}
	return l.Epoch
}

// place puts each row in its state, claimed under the env's lease, and
// empties the log.
func (e *stateEnv) place(t *testing.T) {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT idempotency_key, coalesce(job_id, 0) FROM sendonce_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	var job int64
	if _, err := pgx.ForEachRow(rows, []any{&key, &job}, func() error { e.job[key] = job; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, s := range outbox.States {
		pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET state = $2, claimed_by = $3 WHERE idempotency_key = $1`,
			e.keys[s], string(s), e.lease.Epoch)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM sendonce_outbox`); n != len(outbox.States) {
		t.Fatalf("%d rows, want one per state", n)
	}
	pgtest.Exec(t, e.pool, `DELETE FROM transition_log`)
}

// moves are the changes of key's state the log holds, in order.
func (e *stateEnv) moves(t *testing.T, key string) []string {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT old_state, new_state FROM transition_log WHERE key = $1 ORDER BY n`, key)
	if err != nil {
		t.Fatal(err)
	}
	var from, to string
	var out []string
	if _, err := pgx.ForEachRow(rows, []any{&from, &to}, func() error {
		out = append(out, stateName(outbox.State(from))+" → "+stateName(outbox.State(to)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// state is key's state now, NoRow when it has no row.
func (e *stateEnv) state(t *testing.T, key string) outbox.State {
	t.Helper()
	var s string
	err := e.pool.QueryRow(context.Background(), `SELECT state FROM sendonce_outbox WHERE idempotency_key = $1`, key).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return sendstate.NoRow
	}
	if err != nil {
		t.Fatal(err)
	}
	return outbox.State(s)
}

// goRows enqueues the rows from Go: each is drained (no River job).
func goRows(t *testing.T, e *stateEnv) { enqueue(t, e.pool, e.ob, e.rowKeys()...) }

// jobRows enqueues the rows from Go and gives each a River job of its own,
// as a database upgraded from a release before the drain holds them: for
// the statements that work such jobs.
func jobRows(t *testing.T, e *stateEnv) {
	goRows(t, e)
	outboxtest.GiveJobs(t, e.pool, e.rowKeys()...)
}

// sqlRows inserts the rows with plain SQL: no River job (drained).
func sqlRows(t *testing.T, e *stateEnv) {
	for _, k := range e.rowKeys() {
		insertSQL(t, e.pool, k, "")
	}
}

// runRows enqueues the rows as the members of one run.
func runRows(t *testing.T, e *stateEnv) {
	var in []outbox.Intent
	for _, k := range e.rowKeys() {
		in = append(in, outbox.Intent{Key: k, Payload: json.RawMessage(outboxtest.InvoiceBody)})
	}
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := e.ob.EnqueueRun(context.Background(), tx, outbox.Run{Key: testRun, Intents: in})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runJobRows enqueues the rows as the members of one run, each with a
// River job of its own, as an upgraded database holds them.
func runJobRows(t *testing.T, e *stateEnv) {
	runRows(t, e)
	outboxtest.GiveJobs(t, e.pool, e.rowKeys()...)
}

// batchRows enqueues the rows from Go and freezes them into one batch in
// state, claimed under the env's lease, of run (none when ""), as Freeze
// and a claim leave one: the members name the batch and its job.
func batchRows(state, run string) func(*testing.T, *stateEnv) {
	return func(t *testing.T, e *stateEnv) {
		goRows(t, e)
		keys := e.rowKeys()
		body := `{"emails":[` + strings.Repeat(outboxtest.InvoiceBody+",", len(keys)-1) + outboxtest.InvoiceBody + `]}`
		if run != "" {
			pgtest.Exec(t, e.pool, `INSERT INTO sendonce_run (key) VALUES ($1)`, run)
		}
		pgtest.Exec(t, e.pool, `INSERT INTO sendonce_batch (idempotency_key, queue, body, member_keys, job_id, run_key, state, claimed_by)
			VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7, $8)`, testBatch, outbox.DefaultQueue, body, keys, testBatchJob, run, state, e.lease.Epoch)
		pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET batch_key = $2, job_id = $3 WHERE idempotency_key = ANY($1)`, keys, testBatch, testBatchJob)
	}
}

// stateError is nil for err of an operation refused because of the
// intent's state (or its absence), which the check reads from the row.
func stateError(err error) error {
	var se *outbox.StateError
	if errors.As(err, &se) || errors.Is(err, outbox.ErrNotFound) {
		return nil
	}
	return err
}

// transitionCase runs one statement over a row in each state.
type transitionCase struct {
	name string
	// statement is the Transition.Statement the case exercises, with its
	// Case after a slash when it has one.
	statement string
	// movesNothing says the statement is not in the table: it moves no
	// intent's state.
	movesNothing bool
	rows         func(*testing.T, *stateEnv)
	run          func(context.Context, *testing.T, *stateEnv) error
}

var transitionCases = []transitionCase{
	{name: "Enqueue", statement: "outbox.Enqueue", rows: goRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			enqueue(t, e.pool, e.ob, e.allKeys()...)
			return nil
		}},
	{name: "plain INSERT", statement: "INSERT", rows: sqlRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				if _, err := e.pool.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload) VALUES ($1, 'email', $2)
					ON CONFLICT (idempotency_key) DO NOTHING`, k, outboxtest.InvoiceBody); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "Claim", statement: "ClaimMany", rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				if _, _, err := sendstate.Claim(ctx, e.pool, sendstate.ClaimRequest{Key: k, JobID: e.job[k]}, e.opts()); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "ClaimMany", statement: "ClaimMany", rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			var reqs []sendstate.ClaimRequest
			for _, k := range e.allKeys() {
				reqs = append(reqs, sendstate.ClaimRequest{Key: k, JobID: e.job[k]})
			}
			_, err := sendstate.ClaimMany(ctx, e.pool, reqs, e.opts())
			return err
		}},
	{name: "ClaimDue", statement: "ClaimDue", rows: sqlRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			_, err := sendstate.ClaimDue(ctx, e.pool, 10, e.opts())
			return err
		}},
	{name: "ClaimBatch", statement: "ClaimBatch", rows: batchRows("pending", ""),
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			_, ok, err := sendstate.ClaimBatch(ctx, e.pool, sendstate.ClaimRequest{Key: testBatch, JobID: testBatchJob},
				sendstate.BatchClaimOptions{ClaimOptions: e.opts()})
			if err == nil && !ok {
				err = errors.New("the batch was not claimed")
			}
			return err
		}},
	{name: "MarkSent", statement: "MarkSentMany", rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				_, err := sendstate.MarkSent(ctx, e.pool, sendstate.Sent{Key: k, MessageID: "msg_" + k, Owner: e.lease.Epoch})
				if err != nil && !errors.Is(err, sendstate.ErrLeaseLost) { // not recorded: the row says why
					return err
				}
			}
			return nil
		}},
	{name: "MarkSentMany", statement: "MarkSentMany", rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			var sent []sendstate.Sent
			for _, k := range e.allKeys() {
				sent = append(sent, sendstate.Sent{Key: k, MessageID: "msg_" + k, Owner: e.lease.Epoch})
			}
			_, _, err := sendstate.MarkSentMany(ctx, e.pool, sent)
			return err
		}},
	{name: "MarkSentMany, drained", statement: "MarkSentMany", rows: goRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			var sent []sendstate.Sent
			for _, k := range e.allKeys() {
				sent = append(sent, sendstate.Sent{Key: k, MessageID: "msg_" + k, Owner: e.lease.Epoch})
			}
			_, _, err := sendstate.MarkSentMany(ctx, e.pool, sent)
			return err
		}},
	{name: "RecordBatch, accepted members", statement: "MarkSentMany", rows: batchRows("sending", ""),
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			var sent []sendstate.Sent
			for _, k := range e.allKeys() {
				sent = append(sent, sendstate.Sent{Key: k, MessageID: "msg_" + k})
			}
			_, err := sendstate.RecordBatch(ctx, e.pool, testBatch, e.lease.Epoch, 0, sent, nil)
			return err
		}},
	{name: "MarkFailed", statement: "MarkFailed", rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				if err := sendstate.MarkFailed(ctx, e.pool, e.outcome(k)); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "MarkFailed, drained", statement: "MarkFailed", rows: goRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				if err := sendstate.MarkFailed(ctx, e.pool, e.outcome(k)); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "MarkPending", statement: "MarkPending", rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				if err := sendstate.MarkPending(ctx, e.pool, e.outcome(k)); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "MarkPending, drained", statement: "MarkPending", rows: sqlRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				o := e.outcome(k)
				o.RetryIn = time.Minute
				if err := sendstate.MarkPending(ctx, e.pool, o); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "MarkSuppressed", statement: "MarkSuppressed", rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				if err := sendstate.MarkSuppressed(ctx, e.pool, e.outcome(k)); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "MarkSuppressed, drained", statement: "MarkSuppressed", rows: goRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				if err := sendstate.MarkSuppressed(ctx, e.pool, e.outcome(k)); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "ClaimBatch parks suppressed members", statement: "MarkSuppressed", rows: batchRows("pending", ""),
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			if _, err := e.ob.Suppress(ctx, []string{"ada@example.com"}, "test"); err != nil {
				return err
			}
			b, ok, err := sendstate.ClaimBatch(ctx, e.pool, sendstate.ClaimRequest{Key: testBatch, JobID: testBatchJob},
				sendstate.BatchClaimOptions{ClaimOptions: e.opts()})
			if err == nil && (!ok || len(b.Parked) != 2) {
				err = fmt.Errorf("ClaimBatch = %+v, %v; want the two unsettled members parked", b, ok)
			}
			return err
		}},
	{name: "MarkBatchPending", statement: "MarkBatchPending", rows: batchRows("sending", ""),
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			return sendstate.MarkBatchPending(ctx, e.pool, sendstate.Outcome{Key: testBatch, JobID: testBatchJob, Reason: "503", Owner: e.lease.Epoch})
		}},
	{name: "MarkBatchFailed", statement: "MarkBatchFailed", rows: batchRows("sending", ""),
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			return sendstate.MarkBatchFailed(ctx, e.pool, sendstate.Outcome{Key: testBatch, JobID: testBatchJob, Reason: "401", Owner: e.lease.Epoch})
		}},
	{name: "RecordBatch, refused members", statement: "RecordBatch/a member the API refused", rows: batchRows("sending", ""),
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			var failed []sendstate.ItemFailure
			for _, k := range e.allKeys() {
				failed = append(failed, sendstate.ItemFailure{Key: k, Reason: "422 invalid"})
			}
			_, err := sendstate.RecordBatch(ctx, e.pool, testBatch, e.lease.Epoch, 0, nil, failed)
			return err
		}},
	{name: "Split", statement: "Batcher.Split", rows: batchRows("sending", ""), run: split("")},
	{name: "Split, a member named", statement: "Batcher.Split/the member the API named", rows: batchRows("sending", ""), run: split("422 invalid")},
	{name: "Split, its run canceled", statement: "Batcher.Split/its run canceled", rows: batchRows("sending", testRun),
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_run SET state = 'canceled' WHERE key = $1`, testRun)
			return split("")(ctx, t, e)
		}},
	{name: "RescueDrained", statement: "RescueDrained", rows: sqlRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET claimed_by = $1`, e.deadLease(t))
			_, err := sendstate.RescueDrained(ctx, e.pool, 0)
			return err
		}},
	{name: "ReleaseDrained", statement: "ReleaseDrained", rows: sqlRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET claimed_by = $1`, e.lease.Epoch)
			for _, k := range e.allKeys() {
				if _, err := sendstate.ReleaseDrained(ctx, e.pool, k, e.lease.Epoch); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "UnclaimDrained", statement: "UnclaimDrained", rows: sqlRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET claimed_by = $1`, e.lease.Epoch)
			_, err := sendstate.UnclaimDrained(ctx, e.pool, e.allKeys(), e.lease.Epoch)
			return err
		}},
	{name: "UnclaimDrained, its run canceled", statement: "UnclaimDrained/its run canceled", rows: runRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET claimed_by = $1`, e.lease.Epoch)
			pgtest.Exec(t, e.pool, `UPDATE sendonce_run SET state = 'canceled' WHERE key = $1`, testRun)
			_, err := sendstate.UnclaimDrained(ctx, e.pool, e.allKeys(), e.lease.Epoch)
			return err
		}},
	{name: "ReleaseOrphans", statement: "ReleaseOrphans", rows: sqlRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET claimed_by = $1, updated_at = now() - interval '1 minute'`, e.lease.Epoch)
			_, err := sendstate.ReleaseOrphans(ctx, e.pool, e.lease.Epoch, nil, time.Second)
			return err
		}},
	{name: "Cancel", statement: "outbox.Cancel", rows: goRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				if _, err := e.ob.Cancel(ctx, k); stateError(err) != nil {
					return err
				}
			}
			return nil
		}},
	{name: "Cancel, upgraded", statement: "outbox.Cancel", rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			for _, k := range e.allKeys() {
				if _, err := e.ob.Cancel(ctx, k); stateError(err) != nil {
					return err
				}
			}
			return nil
		}},
	{name: "CancelRun", statement: "outbox.CancelRun", rows: runRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			_, err := e.ob.CancelRun(ctx, testRun)
			return err
		}},
	{name: "Retry", statement: "outbox.Retry", rows: goRows, run: retry(nil)},
	{name: "Retry with force", statement: "outbox.Retry", rows: goRows, run: retry(&outbox.RetryOptions{Force: true})},
	{name: "Retry, upgraded", statement: "outbox.Retry", rows: jobRows, run: retry(nil)},
	{name: "Retry of a batch member", statement: "outbox.Retry", rows: batchRows("failed", ""),
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET uncertain = true, first_attempt_at = now(), attempts = 1`)
			return retry(nil)(ctx, t, e)
		}},
	{name: "Retry with force of a member of an answered batch", statement: "outbox.Retry", rows: batchRows("sent", ""),
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			// Its batch was answered without telling its outcome: only
			// force sends it alone, and force must.
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET uncertain = true, first_attempt_at = now(), attempts = 1`)
			return retry(&outbox.RetryOptions{Force: true})(ctx, t, e)
		}},
	{name: "Retry of an uncertain intent past its window", statement: "outbox.Retry (refused)", movesNothing: true, rows: goRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET uncertain = true, first_attempt_at = now() - interval '2 days', attempts = 1
				WHERE idempotency_key = $1`, e.keys[outbox.StateFailed])
			// Every recipient still suppressed: the suppressed intent stays.
			if _, err := e.ob.Suppress(ctx, []string{"ada@example.com"}, "test"); err != nil {
				return err
			}
			return retry(nil)(ctx, t, e)
		}},
	{name: "Prune", statement: "Prune", rows: sqlRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET created_at = now() - interval '1 hour', updated_at = now() - interval '1 hour'`)
			_, err := sendstate.Prune(ctx, e.pool, sendstate.PruneOptions{Retain: time.Minute, Yield: -1})
			return err
		}},

	// Statements that hand an intent on without moving its state.
	{name: "RescueAbandoned", statement: "RescueAbandoned", movesNothing: true, rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE sendonce_outbox SET claimed_by = $1`, e.deadLease(t))
			return want(1)(e.jobs.RescueAbandoned(ctx, 0)) // the sending one
		}},
	{name: "RescueStranded", statement: "RescueStranded", movesNothing: true, rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = ARRAY['client-dead']`)
			e.deadLease(t)
			return want(1)(e.jobs.RescueStranded(ctx, 0)) // the pending one
		}},
	{name: "Reconcile", statement: "Reconcile", movesNothing: true, rows: jobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			pgtest.Exec(t, e.pool, `DELETE FROM river_job`)
			return want(2)(e.jobs.Reconcile(ctx)) // the pending and the sending one
		}},
	{name: "PauseRun, ResumeRun", statement: "outbox.ResumeRun", movesNothing: true, rows: runRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			if _, err := e.ob.PauseRun(ctx, testRun); err != nil {
				return err
			}
			pgtest.Exec(t, e.pool, `UPDATE river_job SET state = 'cancelled', finalized_at = now()`)
			_, err := e.ob.ResumeRun(ctx, testRun)
			return err
		}},
	{name: "PauseRun, ResumeRun, upgraded", statement: "outbox.ResumeRun", movesNothing: true, rows: runJobRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			if _, err := e.ob.PauseRun(ctx, testRun); err != nil {
				return err
			}
			pgtest.Exec(t, e.pool, `UPDATE river_job SET state = 'cancelled', finalized_at = now()`)
			_, err := e.ob.ResumeRun(ctx, testRun)
			return err
		}},
	{name: "FreezeDue", statement: "FreezeDue", movesNothing: true, rows: sqlRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			insertSQL(t, e.pool, "t:pending-too", "") // the pending one's batch mate
			res, err := e.batcher.FreezeDue(ctx, "", 10, 0)
			return want(2)(res.Members, err) // the pending ones
		}},
	{name: "RescheduleRun", statement: "outbox.RescheduleRun", movesNothing: true, rows: runRows,
		run: func(ctx context.Context, t *testing.T, e *stateEnv) error {
			n, err := e.ob.RescheduleRun(ctx, testRun, time.Now().Add(time.Hour))
			return want(1)(int(n), err) // the pending one
		}},
}

// want is nil when a statement that moves no state handed on n intents,
// so that such a case is not passed by doing nothing.
func want(n int) func(int, error) error {
	return func(got int, err error) error {
		if err == nil && got != n {
			err = fmt.Errorf("handed on %d intents, want %d", got, n)
		}
		return err
	}
}

// split splits the batch into parts of one member each, each named as
// the cause when failed is not "".
func split(failed string) func(context.Context, *testing.T, *stateEnv) error {
	return func(ctx context.Context, t *testing.T, e *stateEnv) error {
		var parts []sendstate.SplitPart
		for _, k := range e.rowKeys() {
			parts = append(parts, sendstate.SplitPart{Members: []string{k}, Failed: failed})
		}
		_, ok, err := e.batcher.Split(ctx, sendstate.Outcome{Key: testBatch, JobID: testBatchJob, Reason: "422 invalid", Owner: e.lease.Epoch}, parts)
		if err == nil && !ok {
			err = errors.New("the batch was not split")
		}
		return err
	}
}

// retry retries every intent as an operator would, one by one.
func retry(opts *outbox.RetryOptions) func(context.Context, *testing.T, *stateEnv) error {
	return func(ctx context.Context, t *testing.T, e *stateEnv) error {
		for _, k := range e.allKeys() {
			if _, err := e.ob.Retry(ctx, k, opts); stateError(err) != nil {
				return err
			}
		}
		return nil
	}
}

// statementKey is how the cases name a Transition's statement.
func statementKey(tr sendstate.Transition) string {
	if tr.Case == "" {
		return tr.Statement
	}
	return tr.Statement + "/" + tr.Case
}

// TestTransitions holds the code to the table of transitions: for each
// statement that moves an intent's state, it puts a row in every state
// (and a key with no row), runs the statement over them, and reads what
// the database recorded. A row whose state the table names as a From of
// the statement must have moved to its To (by a statement that set the
// state: a move to the same state counts only when it was made); any
// other row must not have been moved at all, nor its state set. A WHERE
// clause that admits one state more than the table lists fails it, and so
// does a transition the table lists and the code no longer makes.
func TestTransitions(t *testing.T) {
	t.Parallel()
	table := map[string]map[outbox.State]sendstate.Transition{}
	for _, tr := range sendstate.Transitions {
		k := statementKey(tr)
		if table[k] == nil {
			table[k] = map[outbox.State]sendstate.Transition{}
		}
		if _, dup := table[k][tr.From]; dup {
			t.Errorf("the table lists %s from %s twice", k, stateName(tr.From))
		}
		if tr.By == "" || tr.Rule == "" {
			t.Errorf("%s from %s: By and Rule say who makes it and when", k, stateName(tr.From))
		}
		table[k][tr.From] = tr
	}
	exercised := map[string]bool{}
	for _, c := range transitionCases {
		exercised[c.statement] = true
	}
	for k := range table {
		if !exercised[k] {
			t.Errorf("no case runs %s, which the table lists", k)
		}
	}
	for _, c := range transitionCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			want, listed := table[c.statement]
			if listed == c.movesNothing {
				t.Fatalf("%s: in the table %v, moves nothing %v: one of the two", c.statement, listed, c.movesNothing)
			}
			e := newStateEnv(t)
			c.rows(t, e)
			e.place(t)
			if err := c.run(context.Background(), t, e); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			for _, from := range fromStates {
				key := e.keys[from]
				got, moves := e.state(t, key), e.moves(t, key)
				if tr, ok := want[from]; ok {
					if got != tr.To || len(moves) == 0 {
						t.Errorf("%s from %s: now %s (moves: %v); the table says %s → %s (%s)",
							c.name, stateName(from), stateName(got), moves, stateName(from), stateName(tr.To), tr.By)
					}
					continue
				}
				if got != from || len(moves) > 0 {
					t.Errorf("%s from %s: now %s (moves: %v); the table lists no move of %s from %s",
						c.name, stateName(from), stateName(got), moves, c.statement, stateName(from))
				}
			}
		})
	}
}

// statesDoc is the page that shows the table, from this package's folder.
const statesDoc = "../../../docs/states.md"

// markdownTable is the table of transitions as docs/states.md shows it.
func markdownTable() string {
	var b strings.Builder
	b.WriteString("| from | to | by whom | statement | the rule |\n|---|---|---|---|---|\n")
	for _, tr := range sendstate.Transitions {
		statement := "`" + tr.Statement + "`"
		if tr.Case != "" {
			statement += ", " + tr.Case
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", stateName(tr.From), stateName(tr.To), tr.By, statement, tr.Rule)
	}
	return b.String()
}

// TestStatesDocShowsTheTable: docs/states.md shows the table of
// transitions as it is, row for row.
func TestStatesDocShowsTheTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(statesDoc)
	if err != nil {
		t.Fatal(err)
	}
	want := markdownTable()
	if !strings.Contains(string(b), want) {
		t.Errorf("docs/states.md does not show the table of sendstate.Transitions; its table should read:\n\n%s", want)
	}
}
