package bench

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/client"
)

// Floor is an outbox reduced to the rows it writes per send: River +
// client (DrainRiverClient) plus those writes and nothing else (no lease,
// no budget, no check beyond the row's state). No outbox that makes a
// floor's writes can cost less than the floor, so a floor's ratio to River
// + client bounds what such an outbox can reach. The writes are batched as
// the worker batches its claims and answers (see batchFloor).
type Floor int

// The floors.
const (
	// FloorMark updates the send's outbox row after the call (state sent,
	// the message id). The email comes from the job's arguments.
	FloorMark Floor = iota
	// FloorResult inserts a narrow result row (key, message id) after the
	// call, into a table of its own: the cheapest record of a send's
	// outcome, an append instead of an update. The email comes from the
	// job's arguments.
	FloorResult
	// FloorAttempt is the cheapest outbox that records, before the API is
	// called, that a send may have happened (what a replay after a crash
	// needs to know): one statement reads the intent's payload from its
	// outbox row and inserts a narrow attempt row (key, job id); the
	// payload is sent; a result row is inserted after the call.
	FloorAttempt
	// FloorClaim updates the send's outbox row before the call (sending,
	// one attempt more, the first attempt's time; the payload returned and
	// sent) and after it (sent, the message id): the full path's claim and
	// mark without their checks.
	FloorClaim
)

// Floors are the floors the drain scenario measures, in its order.
var Floors = []Floor{FloorMark, FloorResult, FloorAttempt, FloorClaim}

// String names the floor for the table.
func (f Floor) String() string {
	switch f {
	case FloorMark:
		return "River + client + one batched UPDATE of the send's outbox row after the call"
	case FloorResult:
		return "River + client + one batched INSERT of a narrow result row after the call"
	case FloorAttempt:
		return "River + client + a batched INSERT of a narrow attempt row before the call, reading the payload from the outbox row, and of a result row after it"
	case FloorClaim:
		return "River + client + a batched UPDATE of the send's outbox row before the call, returning the payload, and another after it"
	}
	return fmt.Sprintf("Floor(%d)", int(f))
}

// readsIntent says whether the floor's worker sends the payload stored in
// the intent's outbox row, read by its write before the call, rather than
// the email in the job's arguments.
func (f Floor) readsIntent() bool { return f == FloorAttempt || f == FloorClaim }

// floorTables are the floors' narrow tables, made anew for each drain.
const floorTables = `
	DROP TABLE IF EXISTS bench_floor_attempt, bench_floor_result;
	CREATE TABLE bench_floor_result (key text PRIMARY KEY, message_id text NOT NULL, at timestamptz NOT NULL DEFAULT now());
	CREATE TABLE bench_floor_attempt (key text NOT NULL, job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (key, job_id))`

// The floors' statements: the write before the call (returning each
// intent's key and payload), and the write after it.
const (
	floorAttemptSQL = `WITH r AS MATERIALIZED (
			SELECT o.idempotency_key AS key, o.payload, r.job_id
			FROM unnest((SELECT $1::text[]), (SELECT $2::bigint[])) AS r(key, job_id)
			JOIN sendonce_outbox o ON o.idempotency_key = r.key
			WHERE (o.state IN ('pending', 'sending')) IS TRUE
		), a AS (
			INSERT INTO bench_floor_attempt (key, job_id) SELECT key, job_id FROM r
		)
		SELECT key, payload::text FROM r`
	floorClaimSQL = `UPDATE sendonce_outbox o SET state = 'sending', attempts = o.attempts + 1,
			first_attempt_at = coalesce(o.first_attempt_at, now()), updated_at = now()
		FROM unnest((SELECT $1::text[]), (SELECT $2::bigint[])) AS r(key, job_id)
		WHERE o.idempotency_key = r.key AND (o.state IN ('pending', 'sending')) IS TRUE
		RETURNING o.idempotency_key, o.payload::text`
	floorResultSQL = `INSERT INTO bench_floor_result (key, message_id) SELECT * FROM unnest((SELECT $1::text[]), (SELECT $2::text[]))`
	floorMarkSQL   = `UPDATE sendonce_outbox o SET state = 'sent', message_id = m.id, sent_at = now(), updated_at = now()
		FROM unnest((SELECT $1::text[]), (SELECT $2::text[])) AS m(key, id)
		WHERE o.idempotency_key = m.key AND (o.state IN ('pending', 'sending')) IS TRUE`
)

// DrainFloor drains p.N River + client jobs (as DrainRiverClient) whose
// worker also makes floor's writes, and checks afterwards that each send
// left its records. The intents' outbox rows are inserted up front (not
// timed), pending, with their payloads; they name no River job of the
// outbox's queue, which the drain does not work.
func DrainFloor(ctx context.Context, env *Env, p DrainParams, floor Floor) (DrainResult, error) {
	fake, err := StartFake(p.Latency, p.Concurrency)
	if err != nil {
		return DrainResult{}, err
	}
	defer fake.Close()
	pool, err := env.freshPool(ctx)
	if err != nil {
		return DrainResult{}, err
	}
	defer pool.Close()
	if _, err := env.Admin.Exec(ctx, floorTables); err != nil {
		return DrainResult{}, fmt.Errorf("bench: floor tables: %w", err)
	}
	params := make([]river.InsertManyParams, p.N)
	keys := make([]string, p.N)
	payloads := make([]string, p.N)
	for i := range params {
		keys[i] = fmt.Sprintf("drain:%d", i)
		params[i] = river.InsertManyParams{Args: SendArgs{Key: keys[i], To: Recipient(i), Order: i}}
		b, err := json.Marshal(EmailParams(Recipient(i), i))
		if err != nil {
			return DrainResult{}, err
		}
		payloads[i] = string(b)
	}
	// job_id is the row's number, not a job: set, it keeps the triggers for
	// rows without a job (the producer's checks) out of the way.
	if _, err := env.Admin.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, job_id)
		SELECT key, 'email', payload::jsonb, n FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(key, payload, n)`,
		keys, payloads); err != nil {
		return DrainResult{}, fmt.Errorf("bench: insert the floor's outbox rows: %w", err)
	}
	if _, err := env.Admin.Exec(ctx, "VACUUM ANALYZE sendonce_outbox"); err != nil {
		return DrainResult{}, err
	}
	bctx, stopBatch := context.WithCancel(ctx)
	defer stopBatch()
	w := &floorWorker{client: fake.Client, floor: floor, batch: newBatchFloor(bctx, pool, floor)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	res, err := drainJobs(ctx, env, p, pool, params, workers)
	if err != nil || p.Window > 0 {
		return res, err
	}
	var marked, claimed, results, attempts int
	if err := env.Admin.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM sendonce_outbox WHERE state = 'sent' AND message_id IS NOT NULL),
			(SELECT count(*) FROM sendonce_outbox WHERE attempts = 1),
			(SELECT count(*) FROM bench_floor_result),
			(SELECT count(DISTINCT key) FROM bench_floor_attempt)`).Scan(&marked, &claimed, &results, &attempts); err != nil {
		return res, fmt.Errorf("bench: count the floor's records: %w", err)
	}
	want := map[Floor][4]int{FloorMark: {p.N, 0, 0, 0}, FloorResult: {0, 0, p.N, 0},
		FloorAttempt: {0, 0, p.N, p.N}, FloorClaim: {p.N, p.N, 0, 0}}[floor]
	if got := [4]int{marked, claimed, results, attempts}; got != want {
		return res, fmt.Errorf("bench: %s: %d jobs drained; rows sent, claimed once, results, attempts: %v, want %v", floor, p.N, got, want)
	}
	if delivered := len(fake.Server.Deliveries()); delivered != p.N {
		return res, fmt.Errorf("bench: %d jobs drained, but the fake delivered %d", p.N, delivered)
	}
	return res, nil
}

// floorWorker is SendWorker plus a floor's writes.
type floorWorker struct {
	river.WorkerDefaults[SendArgs]
	client *client.Client
	floor  Floor
	batch  *batchFloor
}

// Work makes the floor's write before the call, if it has one, sends (the
// payload that write read, or the email in the job's arguments), then
// records the outcome.
func (w *floorWorker) Work(ctx context.Context, job *river.Job[SendArgs]) error {
	var email *client.Email
	var err error
	if w.floor.readsIntent() {
		payload, err := w.batch.do(ctx, floorWrite{before: true, key: job.Args.Key, jobID: job.ID})
		if err != nil {
			return err
		}
		if payload == nil {
			return fmt.Errorf("bench: %s: intent %q not found, or not pending", w.floor, job.Args.Key)
		}
		email, err = w.client.Emails.SendJSON(ctx, payload, client.WithIdempotencyKey(job.Args.Key))
		if err != nil {
			return err
		}
	} else if email, err = w.client.Emails.Send(ctx, EmailParams(job.Args.To, job.Args.Order), client.WithIdempotencyKey(job.Args.Key)); err != nil {
		return err
	}
	_, err = w.batch.do(ctx, floorWrite{key: job.Args.Key, messageID: email.ID})
	return err
}

// floorWrite is one send's write, before the call or after it.
type floorWrite struct {
	before    bool
	key       string
	jobID     int64
	messageID string
	done      chan floorDone
}

// floorDone answers a floorWrite: for a write before the call, the
// intent's payload (nil when its row was not found pending or sending).
type floorDone struct {
	payload json.RawMessage
	err     error
}

// batchFloor batches a floor's writes as the worker's batcher batches its
// claims and answers: one loop takes whatever is queued when it is free
// (at most floorBatchMax of a kind, never waiting to fill a batch) and
// writes each kind in one statement, the writes after the call first, in
// one transaction when there are both kinds.
type batchFloor struct {
	pool   *pgxpool.Pool
	floor  Floor
	writes chan floorWrite
}

// floorBatchMax is the worker's batchMax.
const floorBatchMax = 200

func newBatchFloor(ctx context.Context, pool *pgxpool.Pool, floor Floor) *batchFloor {
	b := &batchFloor{pool: pool, floor: floor, writes: make(chan floorWrite)}
	go b.loop(ctx)
	return b
}

func (b *batchFloor) do(ctx context.Context, w floorWrite) (json.RawMessage, error) {
	w.done = make(chan floorDone, 1)
	select {
	case b.writes <- w:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d := <-w.done
	return d.payload, d.err
}

func (b *batchFloor) loop(ctx context.Context) {
	for {
		var batch []floorWrite
		select {
		case w := <-b.writes:
			batch = append(batch, w)
		case <-ctx.Done():
			return
		}
		kinds := map[bool]int{batch[0].before: 1}
	queued:
		for kinds[true] < floorBatchMax && kinds[false] < floorBatchMax {
			select {
			case w := <-b.writes:
				batch = append(batch, w)
				kinds[w.before]++
			default:
				break queued
			}
		}
		wctx := context.WithoutCancel(ctx)
		var payloads map[string]json.RawMessage
		var err error
		if kinds[true] > 0 && kinds[false] > 0 {
			err = pgx.BeginFunc(wctx, b.pool, func(tx pgx.Tx) error {
				payloads, err = b.write(wctx, tx, batch)
				return err
			})
		} else {
			payloads, err = b.write(wctx, b.pool, batch)
		}
		for _, w := range batch {
			w.done <- floorDone{payload: payloads[w.key], err: err}
		}
	}
}

// floorDB is a pool or a transaction.
type floorDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// write makes a batch's writes: those after the call, then those before
// it, returning the payloads these read by key.
func (b *batchFloor) write(ctx context.Context, db floorDB, batch []floorWrite) (map[string]json.RawMessage, error) {
	var beforeKeys, afterKeys, messageIDs []string
	var jobIDs []int64
	for _, w := range batch {
		if w.before {
			beforeKeys, jobIDs = append(beforeKeys, w.key), append(jobIDs, w.jobID)
		} else {
			afterKeys, messageIDs = append(afterKeys, w.key), append(messageIDs, w.messageID)
		}
	}
	if len(afterKeys) > 0 {
		sql := floorResultSQL
		if b.floor == FloorMark || b.floor == FloorClaim {
			sql = floorMarkSQL
		}
		if _, err := db.Exec(ctx, sql, afterKeys, messageIDs); err != nil {
			return nil, fmt.Errorf("bench: floor: record results: %w", err)
		}
	}
	if len(beforeKeys) == 0 {
		return nil, nil
	}
	sql := floorAttemptSQL
	if b.floor == FloorClaim {
		sql = floorClaimSQL
	}
	rows, err := db.Query(ctx, sql, beforeKeys, jobIDs)
	if err != nil {
		return nil, fmt.Errorf("bench: floor: record attempts: %w", err)
	}
	payloads := make(map[string]json.RawMessage, len(beforeKeys))
	var key, payload string
	_, err = pgx.ForEachRow(rows, []any{&key, &payload}, func() error {
		payloads[key] = json.RawMessage(payload)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: floor: record attempts: %w", err)
	}
	return payloads, nil
}

// floorRow is a floor's row: its rate against River + client measured in
// the same run, its database CPU and WAL per job, and the ratio of the
// database CPU. It has no goal: it says what a goal against River + client
// can ask of an outbox that makes the floor's writes.
type floorRow struct {
	floor Floor
	*versusClient
}

func newFloorRow(f Floor, settings string) *floorRow {
	return &floorRow{floor: f, versusClient: newVersusOwn("1. Drain", fmt.Sprintf("floor: %s; %s", f, settings))}
}

// log records one run against the River + client drain of the same run,
// and returns the ratios for the log.
func (r *floorRow) log(res, base DrainResult) string {
	rate, cpu := r.add(res, base)
	return fmt.Sprintf("÷ River + client: rate %s, DB CPU per job %s", Times.Format(rate), Times.Format(cpu))
}

// floorNote is the floors' part of the drain's notes.
const floorNote = "The floor rows drain as many River + client jobs again, with the same settings, each with the writes " +
	"of an outbox reduced to them and nothing else (no lease, no budget, no check beyond the row's state). The " +
	"intents' outbox rows are inserted pending beforehand (not timed). *One UPDATE*: the send's outbox row is marked " +
	"sent after the call, and *one INSERT*: a narrow result row (key, message id) is inserted after it; in these two " +
	"the email comes from the job's arguments, as in River + client. *Attempt and result*: one statement reads the " +
	"intent's payload from its outbox row and inserts a narrow attempt row (key, job id) before the call, that " +
	"payload is sent, and a result row is inserted after it: the cheapest outbox that records before the call that a " +
	"send may have happened, which a replay after a crash needs. *Two UPDATEs*: the outbox row is claimed before the " +
	"call (sending, one attempt more, the first attempt's time, returning the payload) and marked sent after it: the " +
	"full path's two writes without their checks. The writes are batched as the worker batches its claims and " +
	"answers: one loop takes whatever is queued when it is free, and writes it in one transaction. Their ratios are " +
	"taken against the River + client drain of the same run. An outbox that makes a floor's writes cannot cost less " +
	"than the floor."
