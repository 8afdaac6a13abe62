package store

import (
	"context"
	"time"
)

// The coalesced batches (sendonce_batch) as the worker's engine
// (internal/engine/sendstate) freezes, claims, records and splits them, and
// the statements on their members (sendonce_outbox rows bound to a batch by
// batch_key). Each function is one statement (InsertBatch and HandToDrain
// two) in the caller's transaction; the engine's Batcher and its batch
// functions say in which order they lock and write.

// BatchMember is an intent bound, or about to be bound, to a batch: its
// row, key and job (0: none), its payload as JSON, its topic ("": none)
// and its frozen List-Unsubscribe headers ("": none). UnbindBatchMembers
// reads only the row, key and payload.
type BatchMember struct {
	ID              int64
	Key             string
	JobID           int64
	Payload         string
	Topic           string
	ListUnsubscribe string
}

// freezeSQL is SelectFreezeMembers' statement, its rows locked with lock.
// The state check is written so that no index on state can drive the scan
// (see claimSQL): rows are found by key. A drained intent of a tenant with
// limits joins no batch (unlimitedTenantSQL), checked again here as the
// batch is frozen, so that a limit set since FreezeDue read it holds.
func freezeSQL(lock string) string {
	return `SELECT o.id, o.idempotency_key, coalesce(o.job_id, 0), o.payload::text, coalesce(o.topic, ''), o.list_unsubscribe::text
		FROM sendonce_outbox o
		WHERE o.idempotency_key = ANY($1)
			AND (o.idempotency_key, coalesce(o.job_id, 0)) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
			AND (o.job_id IS NOT NULL OR (` + dueSQL + ` <= now() AND o.queue = $5))
			AND o.kind = 'email' AND (o.state = 'pending') IS TRUE AND o.attempts = 0 AND o.batch_key IS NULL
			AND o.run_key IS NOT DISTINCT FROM nullif($3, '')
			AND (o.job_id IS NOT NULL OR ` + unlimitedTenantSQL + `)
			AND NOT (((SELECT EXISTS (SELECT 1 FROM sendonce_suppression))
					OR (o.topic IS NOT NULL AND (SELECT EXISTS (SELECT 1 FROM sendonce_unsubscribe))))
				AND EXISTS (SELECT 1 FROM sendonce_suppressed_addresses(o.kind, o.payload, o.topic)))
			AND (o.topic IS NULL OR $4)
		ORDER BY o.id ` + lock
}

// freezeWaitSQL waits for rows another transaction has locked,
// freezeSkipSQL skips them.
var (
	freezeWaitSQL = freezeSQL(`FOR UPDATE OF o`)
	freezeSkipSQL = freezeSQL(`FOR UPDATE OF o` + ` SKIP LOCKED`)
)

// SelectFreezeMembers locks, in id order, the intents that may join a
// batch of queue and run ("": none) among those named by keys, each only
// while its job is jobIDs[i] (0: none, then only while it is due and of
// queue): email, pending, never attempted, bound to no batch, of run, with
// no suppressed recipient, and with a topic only when topics. skipLocked
// skips the rows another transaction has locked rather than waiting for
// them.
func SelectFreezeMembers(ctx context.Context, db DB, keys []string, jobIDs []int64, run string, topics bool, queue string, skipLocked bool) ([]BatchMember, error) {
	sql := freezeWaitSQL
	if skipLocked {
		sql = freezeSkipSQL
	}
	rows, err := db.Query(ctx, sql, keys, jobIDs, run, topics, queue)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []BatchMember
	for rows.Next() {
		var m BatchMember
		var frozen *string
		if err := rows.Scan(&m.ID, &m.Key, &m.JobID, &m.Payload, &m.Topic, &frozen); err != nil {
			return nil, err
		}
		if frozen != nil {
			m.ListUnsubscribe = *frozen
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// setListUnsubscribeSQL is SetListUnsubscribe's statement.
const setListUnsubscribeSQL = `UPDATE sendonce_outbox SET list_unsubscribe = $2::jsonb WHERE id = $1`

// SetListUnsubscribe freezes the List-Unsubscribe headers (a JSON object)
// on the intent's row id.
func SetListUnsubscribe(ctx context.Context, db DB, id int64, headers string) error {
	_, err := db.Exec(ctx, setListUnsubscribeSQL, id, headers)
	return err
}

// insertBatchSQL writes a frozen batch, and bindBatchSQL binds its
// members to it and to its job: InsertBatch's statements.
const (
	insertBatchSQL = `INSERT INTO sendonce_batch (idempotency_key, queue, body, member_keys, job_id, run_key)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''))`
	bindBatchSQL = `UPDATE sendonce_outbox SET batch_key = $2, job_id = $3, updated_at = now()
		WHERE id = ANY($1)`
)

// InsertBatch writes a frozen batch under key, of queue and run ("":
// none), with its request body, its members' keys in order and its River
// job, and binds the members' rows (memberIDs) to it and to the job.
func InsertBatch(ctx context.Context, db DB, key, queue, body string, memberKeys []string, memberIDs []int64, jobID int64, run string) error {
	if _, err := db.Exec(ctx, insertBatchSQL, key, queue, body, memberKeys, jobID, run); err != nil {
		return err
	}
	_, err := db.Exec(ctx, bindBatchSQL, memberIDs, key, jobID)
	return err
}

// lockBatchForClaimSQL is LockBatchForClaim's statement.
const lockBatchForClaimSQL = `SELECT b.id, b.first_attempt_at IS NULL AND ((SELECT EXISTS (SELECT 1 FROM sendonce_suppression))
				OR (SELECT EXISTS (SELECT 1 FROM sendonce_unsubscribe)))
			FROM sendonce_batch b
			WHERE b.idempotency_key = $1 AND b.job_id = $2 AND (b.state IN ('pending', 'sending')) IS TRUE
				AND (b.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run r WHERE r.key = b.run_key AND r.state = 'paused'))
			FOR UPDATE OF b`

// LockBatchForClaim locks the batch of key for a claim by its job jobID,
// while it is pending or sending and its run is not paused. lookup says it
// was never attempted and the suppression list or the unsubscribes hold
// some address: its first claim looks its members up. ok is false when
// there is no such batch.
func LockBatchForClaim(ctx context.Context, db DB, key string, jobID int64) (id int64, lookup, ok bool, err error) {
	err = db.QueryRow(ctx, lockBatchForClaimSQL, key, jobID).Scan(&id, &lookup)
	if engineNoRows(err) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, err
	}
	return id, lookup, true, nil
}

// ClaimedBatch is a batch ClaimBatch claimed: its key, queue, request
// body, members in order, its attempts (this one counted), whether it is
// uncertain, its API key's fingerprint, its first attempt's time, its
// members' most snoozes, and what remains of its replay window by the
// database's clock at the claim.
type ClaimedBatch struct {
	Key               string
	Queue             string
	Body              string
	Members           []string
	Attempts          int
	Uncertain         bool
	APIKeyFingerprint string
	FirstAttemptAt    time.Time
	Snoozes           int
	WindowLeft        time.Duration
}

// claimBatchSQL is ClaimBatch's statement. Its SET list is claimSQL's on
// purpose (claimSet): a batch's request is claimed as an intent's is.
var claimBatchSQL = `WITH l AS (
			SELECT b.id, b.state AS old_state FROM sendonce_batch b
			WHERE b.idempotency_key = $1 AND b.job_id = $2
				AND (b.run_key IS NULL OR NOT EXISTS (SELECT 1 FROM sendonce_run r WHERE r.key = b.run_key AND r.state = 'paused'))
			FOR UPDATE OF b),
		ub AS (
			UPDATE sendonce_batch b
			SET ` + claimSet("b", "l.old_state") + `,
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
			extract(epoch FROM first_attempt_at + $5::float8 * interval '1 second' - now())::float8 FROM ub`

// ClaimBatch claims the batch of key for one attempt of its job jobID, in
// one statement: the batch and its unsettled members become sending, with
// one more attempt, the batch's first attempt stamped on every member, the
// owner (0: none) and API key recorded; a batch found sending is claimed
// again and marked uncertain, members too. ok is false when the job may
// not claim it (settled, gone, another job's, or its run is paused).
func ClaimBatch(ctx context.Context, db DB, key string, jobID int64, owner int32, fingerprint string, window time.Duration) (b ClaimedBatch, ok bool, err error) {
	var left float64
	err = db.QueryRow(ctx, claimBatchSQL, key, jobID, engineOwner(owner), fingerprint, window.Seconds()).Scan(
		&b.Key, &b.Queue, &b.Body, &b.Members, &b.Attempts, &b.Uncertain, &b.APIKeyFingerprint,
		&b.FirstAttemptAt, &b.Snoozes, &left)
	if engineNoRows(err) {
		return ClaimedBatch{}, false, nil
	}
	if err != nil {
		return ClaimedBatch{}, false, err
	}
	b.WindowLeft = engineSeconds(left)
	return b, true, nil
}

// batchBodySQL is BatchBody's statement.
const batchBodySQL = `SELECT body, member_keys FROM sendonce_batch WHERE id = $1`

// BatchBody reads the request body and the members' keys of the batch id.
func BatchBody(ctx context.Context, db DB, id int64) (body string, keys []string, err error) {
	err = db.QueryRow(ctx, batchBodySQL, id).Scan(&body, &keys)
	return body, keys, err
}

// SuppressedMember is a member of a batch with suppressed recipients: its
// key, its job, and those recipients, sorted.
type SuppressedMember struct {
	Key   string
	JobID int64
	Addrs []string
}

// lockSuppressedMembersSQL is LockSuppressedMembers' statement.
var lockSuppressedMembersSQL = `SELECT o.idempotency_key, o.job_id, s.addrs
		FROM sendonce_outbox o CROSS JOIN LATERAL (SELECT ` + suppressedSQL + `) AS s(addrs)
		WHERE o.idempotency_key = ANY($1) AND o.batch_key = $2 AND (o.state IN ('pending', 'sending')) IS TRUE
			AND s.addrs IS NOT NULL
		ORDER BY o.id FOR UPDATE OF o`

// LockSuppressedMembers locks, in id order, the unsettled members of batch
// (among keys) some of whose recipients are suppressed (suppressedSQL).
func LockSuppressedMembers(ctx context.Context, db DB, keys []string, batch string) ([]SuppressedMember, error) {
	rows, err := db.Query(ctx, lockSuppressedMembersSQL, keys, batch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SuppressedMember
	for rows.Next() {
		var m SuppressedMember
		if err := rows.Scan(&m.Key, &m.JobID, &m.Addrs); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// setMemberSuppressedSQL is SetMemberSuppressed's statement.
const setMemberSuppressedSQL = `UPDATE sendonce_outbox SET suppressed_recipients = $3, updated_at = now()
				WHERE idempotency_key = $1 AND batch_key = $2`

// SetMemberSuppressed stores the suppressed recipients addrs on the member
// key of batch, which is sent without them.
func SetMemberSuppressed(ctx context.Context, db DB, key, batch string, addrs []string) error {
	_, err := db.Exec(ctx, setMemberSuppressedSQL, key, batch, addrs)
	return err
}

// unbindMemberSQL is UnbindMember's statement.
const unbindMemberSQL = `UPDATE sendonce_outbox SET batch_key = NULL, suppressed_recipients = $3, updated_at = now()
		WHERE idempotency_key = $1 AND batch_key = $2`

// UnbindMember takes the member key out of batch, storing its suppressed
// recipients addrs.
func UnbindMember(ctx context.Context, db DB, key, batch string, addrs []string) error {
	_, err := db.Exec(ctx, unbindMemberSQL, key, batch, addrs)
	return err
}

// splitBatchByIDSQL is SplitBatchByID's statement.
const splitBatchByIDSQL = `UPDATE sendonce_batch SET state = 'split', last_error = $2, updated_at = now() WHERE id = $1`

// SplitBatchByID makes the batch id split, with reason.
func SplitBatchByID(ctx context.Context, db DB, id int64, reason string) error {
	_, err := db.Exec(ctx, splitBatchByIDSQL,
		id, reason)
	return err
}

// rewriteBatchSQL is RewriteBatch's statement.
const rewriteBatchSQL = `UPDATE sendonce_batch SET body = $2, member_keys = $3, updated_at = now() WHERE id = $1`

// RewriteBatch replaces the request body and the members of the batch id.
func RewriteBatch(ctx context.Context, db DB, id int64, body string, keys []string) error {
	_, err := db.Exec(ctx, rewriteBatchSQL,
		id, body, keys)
	return err
}

// notSuperseded is the SQL condition that the batch aliased alias has not
// been claimed again since the claim that counted attempt (the int4
// expression; 0: unfenced).
func notSuperseded(alias, attempt string) string {
	return `(` + attempt + ` = 0 OR ` + alias + `.attempts = ` + attempt + `)`
}

// BatchHold is where a batch stands for the record of an attempt: failed,
// its claim owner's with the lease held (owned), and not claimed again
// since the attempt (current).
type BatchHold struct {
	Failed, Owned, Current bool
}

// lockBatchForRecordSQL is LockBatchForRecord's statement.
var lockBatchForRecordSQL = `SELECT b.state = 'failed', ` + owned("b", "$2::int4") + `, ` + notSuperseded("b", "$3::int4") + `
			FROM sendonce_batch b WHERE b.idempotency_key = $1 FOR UPDATE`

// LockBatchForRecord locks the batch of key, as a rescue locks it, and
// says where it stands for the record of the attempt claimed under owner
// (0: none) that counted attempt (0: unfenced). ok is false when there is
// no such batch.
func LockBatchForRecord(ctx context.Context, db DB, key string, owner int32, attempt int) (h BatchHold, ok bool, err error) {
	err = db.QueryRow(ctx, lockBatchForRecordSQL, key, owner, attempt).Scan(&h.Failed, &h.Owned, &h.Current)
	if engineNoRows(err) {
		return BatchHold{}, false, nil
	}
	if err != nil {
		return BatchHold{}, false, err
	}
	return h, true, nil
}

// failBatchMembersSQL is FailBatchMembers's statement.
const failBatchMembersSQL = `UPDATE sendonce_outbox o
				SET state = 'failed', last_error = f.reason, uncertain = o.uncertain OR f.uncertain, updated_at = now()
				FROM unnest($1::text[], $2::text[], $3::bool[]) AS f(key, reason, uncertain)
				WHERE o.idempotency_key = f.key AND o.batch_key = $4 AND o.state IN ('pending', 'sending')`

// FailBatchMembers parks the unsettled members keys[i] of batch as failed
// with reasons[i], uncertain with uncertain[i].
func FailBatchMembers(ctx context.Context, db DB, batch string, keys, reasons []string, uncertain []bool) error {
	_, err := db.Exec(ctx, failBatchMembersSQL,
		keys, reasons, uncertain, batch)
	return err
}

// markBatchSentSQL is MarkBatchSent's statement.
const markBatchSentSQL = `UPDATE sendonce_batch SET state = 'sent', last_error = NULL, updated_at = now()
			WHERE idempotency_key = $1`

// MarkBatchSent makes the batch of key sent.
func MarkBatchSent(ctx context.Context, db DB, key string) error {
	_, err := db.Exec(ctx, markBatchSentSQL, key)
	return err
}

// markBatchSQL is MarkBatch's statement.
var markBatchSQL = `WITH b AS (
			UPDATE sendonce_batch b SET state = $3, last_error = $4, uncertain = uncertain OR $5, updated_at = now()
			WHERE idempotency_key = $1 AND job_id = $2 AND state IN ('pending', 'sending') AND ` + owned("b", "$7::int4") + `
				AND ` + notSuperseded("b", "$8::int4") + `
			RETURNING idempotency_key, member_keys)
		UPDATE sendonce_outbox o
		SET state = $3, last_error = $4, uncertain = o.uncertain OR $5,
			snoozes = o.snoozes + CASE WHEN $6 THEN 1 ELSE 0 END, updated_at = now()
		FROM b WHERE o.idempotency_key = ANY(b.member_keys) AND o.batch_key = b.idempotency_key
			AND o.state IN ('pending', 'sending')`

// MarkBatch puts the batch o.Key and its unsettled members in state
// (pending or failed) with o.Reason, uncertain with o.Uncertain, one more
// snooze with o.Snoozed, while the batch is pending or sending, its job is
// o.JobID, its claim is o.Owner's (lease held; 0: unfenced) and no later
// claim superseded o.Attempt (0: unfenced).
func MarkBatch(ctx context.Context, db DB, state string, o Outcome) error {
	_, err := db.Exec(ctx, markBatchSQL, o.Key, o.JobID, state, o.Reason, o.Uncertain, o.Snoozed, o.Owner, o.Attempt)
	return err
}

// lockBatchForSplitSQL is LockBatchForSplit's statement.
var lockBatchForSplitSQL = `SELECT queue, coalesce(run_key, ''), uncertain FROM sendonce_batch b
			WHERE idempotency_key = $1 AND job_id = $2 AND state IN ('pending', 'sending') AND ` + owned("b", "$3::int4") + `
				AND ` + notSuperseded("b", "$4::int4") + ` FOR UPDATE`

// LockBatchForSplit locks the batch of key for a split by its job jobID,
// while it is pending or sending, its claim is owner's (lease held; 0:
// unfenced) and no later claim superseded attempt (0: unfenced), and reads
// its queue, run ("": none) and whether it is uncertain. ok is false when
// there is no such batch.
func LockBatchForSplit(ctx context.Context, db DB, key string, jobID int64, owner int32, attempt int) (queue, run string, uncertain, ok bool, err error) {
	err = db.QueryRow(ctx, lockBatchForSplitSQL, key, jobID, owner, attempt).Scan(&queue, &run, &uncertain)
	if engineNoRows(err) {
		return "", "", false, false, nil
	}
	if err != nil {
		return "", "", false, false, err
	}
	return queue, run, uncertain, true, nil
}

// splitBatchSQL is SplitBatch's statement.
const splitBatchSQL = `UPDATE sendonce_batch SET state = 'split', last_error = $2, updated_at = now()
			WHERE idempotency_key = $1`

// SplitBatch makes the batch of key split, with reason.
func SplitBatch(ctx context.Context, db DB, key, reason string) error {
	_, err := db.Exec(ctx, splitBatchSQL, key, reason)
	return err
}

// cancelBatchMembersSQL is CancelBatchMembers's statement.
const cancelBatchMembersSQL = `UPDATE sendonce_outbox SET state = 'canceled', batch_key = NULL,
						first_attempt_at = NULL, suppressed_recipients = NULL, last_error = $3, updated_at = now()
					WHERE batch_key = $1 AND idempotency_key = ANY($2) AND state IN ('pending', 'sending')`

// CancelBatchMembers cancels the unsettled members keys of batch, unbound
// from it, their first attempt and suppressed recipients cleared, with
// reason.
func CancelBatchMembers(ctx context.Context, db DB, batch string, keys []string, reason string) error {
	_, err := db.Exec(ctx, cancelBatchMembersSQL,
		batch, keys, reason)
	return err
}

// unbindBatchMembersSQL is UnbindBatchMembers's statement.
const unbindBatchMembersSQL = `UPDATE sendonce_outbox SET state = 'pending', batch_key = NULL,
					first_attempt_at = CASE WHEN uncertain THEN first_attempt_at END,
					suppressed_recipients = CASE WHEN uncertain THEN suppressed_recipients END, updated_at = now()
				WHERE idempotency_key = ANY($1) AND batch_key = $2 AND state IN ('pending', 'sending')
				RETURNING id, idempotency_key, payload::text`

// UnbindBatchMembers puts the unsettled members keys of batch back to
// pending, unbound from it, their first attempt and suppressed recipients
// kept only when uncertain, and returns their rows, keys and payloads.
func UnbindBatchMembers(ctx context.Context, db DB, keys []string, batch string) ([]BatchMember, error) {
	rows, err := db.Query(ctx, unbindBatchMembersSQL, keys, batch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []BatchMember
	for rows.Next() {
		var m BatchMember
		if err := rows.Scan(&m.ID, &m.Key, &m.Payload); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// failIntentsSQL is FailIntents's statement.
const failIntentsSQL = `UPDATE sendonce_outbox SET state = 'failed', last_error = $2, updated_at = now()
					WHERE id = ANY($1)`

// FailIntents parks the intents ids as failed with reason.
func FailIntents(ctx context.Context, db DB, ids []int64, reason string) error {
	_, err := db.Exec(ctx, failIntentsSQL, ids, reason)
	return err
}

// handToDrainSQL is HandToDrain's statement before the notification.
const handToDrainSQL = `UPDATE sendonce_outbox SET job_id = NULL, next_attempt_at = NULL WHERE id = $1`

// HandToDrain takes the River job off the intent id, due at once, so that
// a drain claims it, and wakes the drains at commit (NotifyDrains).
func HandToDrain(ctx context.Context, db DB, id int64) error {
	if _, err := db.Exec(ctx, handToDrainSQL, id); err != nil {
		return err
	}
	return NotifyDrains(ctx, db)
}

// shareRunSQL is ShareRun's statement.
const shareRunSQL = `SELECT state FROM sendonce_run WHERE key = $1 FOR SHARE`

// ShareRun reads the state of run and locks its row FOR SHARE, the lock a
// freeze and a split take against CancelRun and RescheduleRun (FOR
// UPDATE); "" when there is no such run.
func ShareRun(ctx context.Context, db DB, run string) (string, error) {
	var state string
	err := db.QueryRow(ctx, shareRunSQL, run).Scan(&state)
	if engineNoRows(err) {
		return "", nil
	}
	return state, err
}

// peekBatchSQL is PeekBatch's statement.
const peekBatchSQL = `SELECT state, job_id FROM sendonce_batch WHERE idempotency_key = $1`

// PeekBatch reads where the batch of key stands: its state and River job.
// It returns pgx.ErrNoRows when there is none.
func PeekBatch(ctx context.Context, db DB, key string) (state string, jobID *int64, err error) {
	err = db.QueryRow(ctx, peekBatchSQL, key).Scan(&state, &jobID)
	return state, jobID, err
}
