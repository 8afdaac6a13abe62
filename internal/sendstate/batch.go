package sendstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/internal/sendjob"
)

// BatchKeyPrefix starts the idempotency key of every coalesced batch.
const BatchKeyPrefix = "sendonce-batch:"

// Batcher freezes coalesced email intents into batches. A frozen batch is
// a row of sendonce_batch with its own key, its request body and its
// members in order, and a River job (sendjob.BatchArgs) that sends it; its
// members name that job and the batch, so their own jobs do nothing more.
type Batcher struct {
	Pool  *pgxpool.Pool
	River *river.Client[pgx.Tx]
}

// Freeze binds the intents of the given jobs into one batch on queue, of
// run (empty for lone intents), in one transaction (rows are found by key;
// the state check is written so that no index on state can drive the scan,
// as in ClaimMany): only intents that are email, pending, never attempted
// and bound to no batch join (and only while their job is the one named on
// the row). An intent with a suppressed recipient does not join: its own
// job sends it alone, without that recipient, or parks it. It returns the batch's key and the job ids that joined. When
// fewer than two intents may join, nothing is written and joined is empty:
// a lone intent is sent alone, under its own key.
func (b *Batcher) Freeze(ctx context.Context, queue, run string, reqs []ClaimRequest) (key string, joined []int64, err error) {
	keys := make([]string, len(reqs))
	jobIDs := make([]int64, len(reqs))
	for i, r := range reqs {
		keys[i], jobIDs[i] = r.Key, r.JobID
	}
	err = pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT o.id, o.idempotency_key, o.job_id, o.payload::text FROM sendonce_outbox o
			WHERE o.idempotency_key = ANY($1)
				AND (o.idempotency_key, o.job_id) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
				AND o.kind = 'email' AND (o.state = 'pending') IS TRUE AND o.attempts = 0 AND o.batch_key IS NULL
				AND o.run_key IS NOT DISTINCT FROM nullif($3, '')
				AND NOT ((SELECT EXISTS (SELECT 1 FROM sendonce_suppression)) AND sendonce_suppressed(o.kind, o.payload) IS NOT NULL)
			ORDER BY o.id FOR UPDATE OF o`, keys, jobIDs, run)
		if err != nil {
			return err
		}
		var ms []member
		for rows.Next() {
			var m member
			var jobID int64
			if err := rows.Scan(&m.id, &m.key, &jobID, &m.payload); err != nil {
				rows.Close()
				return err
			}
			ms, joined = append(ms, m), append(joined, jobID)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ms) < 2 {
			joined = nil
			return nil
		}
		key, err = insertBatch(ctx, tx, b.River, queue, run, ms)
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("sendstate: freeze batch: %w", err)
	}
	return key, joined, nil
}

// member is an intent joining a batch: its row, key and payload as JSON.
type member struct {
	id           int64
	key, payload string
}

// insertBatch writes a frozen batch of the members, in order (its body is
// {"emails":[their payloads]}), and its job, and binds the rows to it.
func insertBatch(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], queue, run string, ms []member) (string, error) {
	ids := make([]int64, len(ms))
	keys := make([]string, len(ms))
	body := []byte(`{"emails":[`)
	for i, m := range ms {
		if i > 0 {
			body = append(body, ',')
		}
		ids[i], keys[i], body = m.id, m.key, append(body, m.payload...)
	}
	body = append(body, "]}"...)
	key := BatchKeyPrefix + uuid.NewString()
	job, err := rc.InsertTx(ctx, tx, sendjob.BatchArgs{Key: key, RunKey: run}, sendjob.InsertOpts(queue, time.Time{}, sendjob.PriorityFor(run)))
	if err != nil {
		return "", fmt.Errorf("insert river job: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sendonce_batch (idempotency_key, queue, body, member_keys, job_id, run_key)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''))`, key, queue, string(body), keys, job.Job.ID, run); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `UPDATE sendonce_outbox SET batch_key = $2, job_id = $3, updated_at = now()
		WHERE id = ANY($1)`, ids, key, job.Job.ID); err != nil {
		return "", err
	}
	return key, nil
}

// Batch is a frozen batch claimed for one attempt.
type Batch struct {
	Key       string
	Queue     string
	Body      json.RawMessage
	Members   []string
	Attempts  int
	Snoozes   int
	Uncertain bool
	// APIKeyFingerprint is the API key of the batch's attempts.
	APIKeyFingerprint string
	FirstAttemptAt    time.Time
	// WindowLeft is what remains of the replay window at the claim, by the
	// database's clock, measured from the batch's first attempt.
	WindowLeft time.Duration
}

// ClaimBatch claims a frozen batch for one attempt of its job (its SET
// list mirrors ClaimMany's on purpose: a batch's request is claimed as an
// intent's is): the batch
// and its unsettled members become sending, with one more attempt, the
// batch's first attempt stamped on every member (their replay window runs
// from it), the owner and API key recorded. A batch left sending by a crash
// is claimed again and marked uncertain, members too. ok is false when the
// job may not send the batch (settled, gone, another job's, or its run is
// paused).
func ClaimBatch(ctx context.Context, db DB, req ClaimRequest, opts ClaimOptions) (b *Batch, ok bool, err error) {
	var owner *int32
	if opts.Owner != 0 {
		owner = &opts.Owner
	}
	b = &Batch{}
	var left float64
	var body string
	err = db.QueryRow(ctx, `WITH l AS (
			SELECT b.id, b.state AS old_state FROM sendonce_batch b
			WHERE b.idempotency_key = $1 AND b.job_id = $2
				AND (b.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run r WHERE r.key = b.run_key AND r.state = 'paused'))
			FOR UPDATE OF b),
		ub AS (
			UPDATE sendonce_batch b
			SET state = 'sending', attempts = b.attempts + 1,
				uncertain = b.uncertain OR l.old_state = 'sending',
				first_attempt_at = coalesce(b.first_attempt_at, now()),
				claimed_by = $3,
				api_key_fingerprint = CASE
					WHEN $4 = '' THEN b.api_key_fingerprint
					WHEN b.uncertain OR l.old_state = 'sending' THEN coalesce(b.api_key_fingerprint, $4)
					ELSE $4 END,
				updated_at = now()
			FROM l WHERE b.id = l.id AND l.old_state IN ('pending', 'sending')
			RETURNING b.*),
		um AS (
			UPDATE sendonce_outbox o
			SET state = 'sending', attempts = o.attempts + 1, uncertain = o.uncertain OR ub.uncertain,
				first_attempt_at = coalesce(o.first_attempt_at, ub.first_attempt_at), claimed_by = $3,
				api_key_fingerprint = ub.api_key_fingerprint, updated_at = now()
			FROM ub WHERE o.idempotency_key = ANY(ub.member_keys) AND o.batch_key = ub.idempotency_key
				AND o.state IN ('pending', 'sending')
			RETURNING o.snoozes)
		SELECT idempotency_key, queue, body, member_keys, attempts, uncertain, coalesce(api_key_fingerprint, ''),
			first_attempt_at, (SELECT coalesce(max(snoozes), 0) FROM um),
			extract(epoch FROM first_attempt_at + $5::float8 * interval '1 second' - now())::float8 FROM ub`,
		req.Key, req.JobID, owner, opts.KeyFingerprint, opts.ReplayWindow.Seconds()).Scan(
		&b.Key, &b.Queue, &body, &b.Members, &b.Attempts, &b.Uncertain, &b.APIKeyFingerprint,
		&b.FirstAttemptAt, &b.Snoozes, &left)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("sendstate: claim batch %q: %w", req.Key, err)
	}
	b.Body = json.RawMessage(body)
	b.WindowLeft = time.Duration(left * float64(time.Second))
	return b, true, nil
}

// ItemFailure is a member the API refused within an accepted batch.
type ItemFailure struct {
	Key    string
	Reason string
	// Uncertain says the answer did not tell this member's outcome.
	Uncertain bool
}

// RecordBatch records the API's answer to a batch in one transaction: each
// accepted member sent with its message id, each refused one failed with
// its reason, and the batch sent. It returns the keys that were failed
// before they were recorded sent (as MarkSentMany).
func RecordBatch(ctx context.Context, db *pgxpool.Pool, key string, sent []Sent, failed []ItemFailure) (overrode []string, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if len(sent) > 0 {
			var err error
			if overrode, err = MarkSentMany(ctx, tx, sent); err != nil {
				return err
			}
		}
		if len(failed) > 0 {
			keys := make([]string, len(failed))
			reasons := make([]string, len(failed))
			uncertain := make([]bool, len(failed))
			for i, f := range failed {
				keys[i], reasons[i], uncertain[i] = f.Key, f.Reason, f.Uncertain
			}
			if _, err := tx.Exec(ctx, `UPDATE sendonce_outbox o
				SET state = 'failed', last_error = f.reason, uncertain = o.uncertain OR f.uncertain, updated_at = now()
				FROM unnest($1::text[], $2::text[], $3::bool[]) AS f(key, reason, uncertain)
				WHERE o.idempotency_key = f.key AND o.batch_key = $4 AND o.state IN ('pending', 'sending')`,
				keys, reasons, uncertain, key); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE sendonce_batch SET state = 'sent', last_error = NULL, updated_at = now()
			WHERE idempotency_key = $1`, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sendstate: record batch %q: %w", key, err)
	}
	return overrode, nil
}

// MarkBatchPending puts a batch and its unsettled members back to pending
// after an attempt that will be tried again. Only the batch's job may.
func MarkBatchPending(ctx context.Context, db DB, o Outcome) error {
	return markBatch(ctx, db, "pending", o)
}

// MarkBatchFailed parks a batch and its unsettled members as failed. Only
// the batch's job may.
func MarkBatchFailed(ctx context.Context, db DB, o Outcome) error {
	return markBatch(ctx, db, "failed", o)
}

func markBatch(ctx context.Context, db DB, state string, o Outcome) error {
	_, err := db.Exec(ctx, `WITH b AS (
			UPDATE sendonce_batch SET state = $3, last_error = $4, uncertain = uncertain OR $5, updated_at = now()
			WHERE idempotency_key = $1 AND job_id = $2 AND state IN ('pending', 'sending')
			RETURNING idempotency_key, member_keys)
		UPDATE sendonce_outbox o
		SET state = $3, last_error = $4, uncertain = o.uncertain OR $5,
			snoozes = o.snoozes + CASE WHEN $6 THEN 1 ELSE 0 END, updated_at = now()
		FROM b WHERE o.idempotency_key = ANY(b.member_keys) AND o.batch_key = b.idempotency_key
			AND o.state IN ('pending', 'sending')`,
		o.Key, o.JobID, state, o.Reason, o.Uncertain, o.Snoozed)
	if err != nil {
		return fmt.Errorf("sendstate: mark batch %s %q: %w", state, o.Key, err)
	}
	return nil
}

// ErrSplitUncertain is Split's refusal of a batch an earlier attempt of
// which may have reached the API.
var ErrSplitUncertain = errors.New("an earlier attempt of the batch may have been delivered: an uncertain batch is never split")

// SplitPart is one part of a batch refused whole: its members, in order,
// and, when the answer named one member as the cause, Failed holds that
// member's reason (a part of one failed member).
type SplitPart struct {
	Members []string
	Failed  string
}

// Split replaces a batch the API refused whole (a 4xx: nothing of it was
// accepted, so its members may go out under other keys) with its parts, in
// one transaction: a part of two or more becomes a new frozen batch with
// its own key and job; a part of one is unbound and given a job of its own,
// to be sent alone; a part with Failed is that member parked as failed. The
// batch becomes split with the reason. Only the batch's job may split it;
// it returns the new batches' keys, or ok false when the job may not.
//
// An uncertain batch (an earlier attempt may have reached the API) is
// never split: the API may hold its delivery under the batch's key, and
// its members sent under new keys would be delivered twice. Split refuses
// it with ErrSplitUncertain and changes nothing.
func (b *Batcher) Split(ctx context.Context, o Outcome, parts []SplitPart) (keys []string, ok bool, err error) {
	err = pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		var queue, run string
		var uncertain bool
		err := tx.QueryRow(ctx, `SELECT queue, coalesce(run_key, ''), uncertain FROM sendonce_batch
			WHERE idempotency_key = $1 AND job_id = $2 AND state IN ('pending', 'sending') FOR UPDATE`,
			o.Key, o.JobID).Scan(&queue, &run, &uncertain)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if uncertain {
			return ErrSplitUncertain
		}
		if _, err := tx.Exec(ctx, `UPDATE sendonce_batch SET state = 'split', last_error = $2, updated_at = now()
			WHERE idempotency_key = $1`, o.Key, o.Reason); err != nil {
			return err
		}
		ok = true
		for _, p := range parts {
			rows, err := tx.Query(ctx, `UPDATE sendonce_outbox SET state = 'pending', batch_key = NULL,
					first_attempt_at = CASE WHEN uncertain THEN first_attempt_at END, updated_at = now()
				WHERE idempotency_key = ANY($1) AND batch_key = $2 AND state IN ('pending', 'sending')
				RETURNING id, idempotency_key, payload::text`, p.Members, o.Key)
			if err != nil {
				return err
			}
			byKey := map[string]member{}
			for rows.Next() {
				var m member
				if err := rows.Scan(&m.id, &m.key, &m.payload); err != nil {
					rows.Close()
					return err
				}
				byKey[m.key] = m
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			var ms []member // the part's members still bound to the batch, in order
			var ids []int64
			for _, k := range p.Members {
				if m, ok := byKey[k]; ok {
					ms, ids = append(ms, m), append(ids, m.id)
				}
			}
			switch {
			case len(ids) == 0:
			case p.Failed != "":
				if _, err := tx.Exec(ctx, `UPDATE sendonce_outbox SET state = 'failed', last_error = $2, updated_at = now()
					WHERE id = ANY($1)`, ids, p.Failed); err != nil {
					return err
				}
			case len(ids) == 1:
				job, err := b.River.InsertTx(ctx, tx, sendjob.Args{Key: ms[0].key, IntentKind: "email", RunKey: run},
					sendjob.InsertOpts(queue, time.Time{}, sendjob.PriorityFor(run)))
				if err != nil {
					return fmt.Errorf("insert river job: %w", err)
				}
				if _, err := tx.Exec(ctx, `UPDATE sendonce_outbox SET job_id = $2 WHERE id = $1`, ids[0], job.Job.ID); err != nil {
					return err
				}
			default:
				k, err := insertBatch(ctx, tx, b.River, queue, run, ms)
				if err != nil {
					return err
				}
				keys = append(keys, k)
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("sendstate: split batch %q: %w", o.Key, err)
	}
	return keys, ok, nil
}

// PeekBatch tells a batch job that could not claim its batch where the
// batch stands. It returns pgx.ErrNoRows wrapped when there is none.
func PeekBatch(ctx context.Context, db DB, key string) (state string, jobID *int64, err error) {
	err = db.QueryRow(ctx, `SELECT state, job_id FROM sendonce_batch WHERE idempotency_key = $1`, key).Scan(&state, &jobID)
	if err != nil {
		return "", nil, fmt.Errorf("sendstate: peek batch %q: %w", key, err)
	}
	return state, jobID, nil
}
