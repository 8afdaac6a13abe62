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

	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/base/suppress"
	"github.com/sendonce/sendonce/internal/base/unsub"
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
	// Unsubscribe signs the List-Unsubscribe headers of members with a
	// topic, frozen into the batch's body and onto each member's row; nil:
	// an intent with a topic does not join a batch (its own job parks it).
	Unsubscribe *unsub.Signer
}

// Freeze binds the intents of the given jobs into one batch on queue, of
// run (empty for lone intents), in one transaction (rows are found by key;
// the state check is written so that no index on state can drive the scan,
// as in ClaimMany): only intents that are email, pending, never attempted
// and bound to no batch join (and only while their job is the one named on
// the row; a request with JobID 0 names an intent without a River job, a
// drained one, which joins only while it is due and of queue), and none of a canceled run (the run's row is locked, so a
// freeze and a CancelRun of its run never overlap). An intent with a
// suppressed recipient does not join: its own job sends it alone, without
// that recipient, or parks it (an address suppressed after the freeze is
// looked up by the batch's first claim, see ClaimBatch). It returns the
// batch's key and the job ids that joined.
// When fewer than two intents may join, nothing is written and joined is
// empty: a lone intent is sent alone, under its own key.
func (b *Batcher) Freeze(ctx context.Context, queue, run string, reqs []ClaimRequest) (key string, joined []int64, err error) {
	err = pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		key, joined, _, err = b.freeze(ctx, tx, queue, run, reqs, false)
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("sendstate: freeze batch: %w", err)
	}
	return key, joined, nil
}

// FreezeTx is Freeze in the caller's transaction: the batch is frozen
// when it commits.
func (b *Batcher) FreezeTx(ctx context.Context, tx pgx.Tx, queue, run string, reqs []ClaimRequest) (key string, joined []int64, err error) {
	key, joined, _, err = b.freeze(ctx, tx, queue, run, reqs, false)
	if err != nil {
		return "", nil, fmt.Errorf("sendstate: freeze batch: %w", err)
	}
	return key, joined, nil
}

// freeze is Freeze's and FreezeDue's work in tx. A request with JobID 0
// names an intent without a River job (the drain's), which joins only
// while it is due and of queue; skipLocked skips the rows another
// transaction has locked (FreezeDue's: another drain claiming or freezing
// them) rather than waiting for them. It returns the batch's key, and the
// job ids and keys of the intents that joined.
func (b *Batcher) freeze(ctx context.Context, tx pgx.Tx, queue, run string, reqs []ClaimRequest, skipLocked bool) (string, []int64, []string, error) {
	if run != "" {
		// The run's row is the lock a freeze and the run's operations
		// (CancelRun, RescheduleRun, which lock it FOR UPDATE) serialise
		// on. Without it a batch frozen while the run was canceled
		// escaped the cancel: the cancel's statements did not see the
		// uncommitted batch, nor its members, which the freeze had bound
		// to it, and the batch's job mailed a canceled run. With it,
		// whichever comes second sees the other's outcome: a cancel, the
		// batch (and cancels it); a freeze, the run canceled. FOR SHARE:
		// freezes of one run do not wait for each other.
		state, err := store.ShareRun(ctx, tx, run)
		if err != nil {
			return "", nil, nil, err
		}
		if state == "" || state == "canceled" {
			return "", nil, nil, nil
		}
	}
	keys := make([]string, len(reqs))
	jobIDs := make([]int64, len(reqs))
	for i, r := range reqs {
		keys[i], jobIDs[i] = r.Key, r.JobID
	}
	rows, err := store.SelectFreezeMembers(ctx, tx, keys, jobIDs, run, b.Unsubscribe != nil, queue, skipLocked)
	if err != nil {
		return "", nil, nil, err
	}
	var ms []member
	var joined []int64
	var joinedKeys []string
	for _, r := range rows {
		m := member{id: r.ID, key: r.Key, payload: r.Payload, topic: r.Topic, headers: r.ListUnsubscribe}
		ms, joined, joinedKeys = append(ms, m), append(joined, r.JobID), append(joinedKeys, m.key)
	}
	if len(ms) < 2 {
		return "", nil, nil, nil
	}
	for i := range ms {
		if err := b.withHeaders(ctx, tx, &ms[i]); err != nil {
			return "", nil, nil, err
		}
	}
	key, err := insertBatch(ctx, tx, b.River, queue, run, ms)
	if err != nil {
		return "", nil, nil, err
	}
	return key, joined, joinedKeys, nil
}

// member is an intent joining a batch: its row, key and payload as JSON,
// its topic and its frozen List-Unsubscribe headers ("" when none).
type member struct {
	id                           int64
	key, payload, topic, headers string
}

// withHeaders freezes a member's List-Unsubscribe headers on its row (once:
// they are kept if it had them) and puts them into its payload for the
// batch's body, which is frozen in the same transaction.
func (b *Batcher) withHeaders(ctx context.Context, tx pgx.Tx, m *member) error {
	if m.topic == "" {
		return nil
	}
	if m.headers == "" {
		h, err := b.Unsubscribe.Freeze("email", json.RawMessage(m.payload), m.topic, nil)
		if err != nil {
			return err
		}
		m.headers = string(h)
		if err := store.SetListUnsubscribe(ctx, tx, m.id, m.headers); err != nil {
			return err
		}
	}
	p, err := unsub.Attach("email", json.RawMessage(m.payload), json.RawMessage(m.headers))
	if err != nil {
		return err
	}
	m.payload = string(p)
	return nil
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
	if err := store.InsertBatch(ctx, tx, key, queue, string(body), keys, ids, job.Job.ID, run); err != nil {
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
	// Parked are the members this claim (the batch's first) took out of
	// the batch for the suppression list, and Stripped the members it
	// sends without some recipients (see ClaimBatch).
	Parked   []ParkedMember
	Stripped []string
	// Owner is the lease epoch the claim was made under: the records of
	// this attempt carry it.
	Owner int32
}

// ParkedMember is a member a batch's first claim took out of the batch:
// parked as suppressed, or, when its body could not be rewritten, failed.
type ParkedMember struct {
	Key    string
	Failed bool
	Reason string
}

// BatchClaimOptions are a batch claim's options: a claim's, and what to do
// with a member some of whose recipients are suppressed.
type BatchClaimOptions struct {
	ClaimOptions
	// ParkPartlySuppressed parks such a member as suppressed; otherwise
	// it is sent without those recipients.
	ParkPartlySuppressed bool
}

// The reasons of a member parked at its batch's first claim: a single
// send's own (the worker's suppress), so an operator reads one rule.
const (
	reasonAllSuppressed    = "not sent: every recipient is on the suppression list"
	reasonPartlySuppressed = "not sent: some recipients are on the suppression list, and partly suppressed intents are parked"
	reasonBatchSuppressed  = "not sent: its first claim took every member out for the suppression list (each member's own state says why)"
)

// ClaimBatch claims a frozen batch for one attempt of its job (its SET
// list mirrors ClaimMany's on purpose: a batch's request is claimed as an
// intent's is): the batch
// and its unsettled members become sending, with one more attempt, the
// batch's first attempt stamped on every member (their replay window runs
// from it), the owner and API key recorded. A batch left sending by a crash
// is claimed again and marked uncertain, members too. ok is false when the
// job may not send the batch (settled, gone, another job's, or its run is
// paused).
//
// The first claim of a batch (no first attempt yet: the API has never
// seen its key) looks its members' recipients up on the suppression list,
// as a single send's first claim does, in the claim's transaction. The
// list may have changed since the batch was frozen (a bounce), and a
// frozen body would otherwise mail an address suppressed meanwhile. A
// member none of whose "to" recipients is left, or, with
// ParkPartlySuppressed, any member with a suppressed recipient, is parked
// as suppressed with a single send's reason and taken out of the batch
// (unbound, no attempt); another one's email is sent without the
// suppressed recipients, which are stored on its row. The batch's body and
// members are rewritten once, then, and every later attempt sends that
// body under the key, so a replay still works. When no member is left the
// batch becomes split and nothing is claimed: ok is true, and b holds no
// member, only Parked.
//
// With an owner whose lease has ended it claims nothing and returns
// ErrLeaseLost.
func ClaimBatch(ctx context.Context, db *pgxpool.Pool, req ClaimRequest, opts BatchClaimOptions) (b *Batch, ok bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if opts.Owner != 0 {
			held, err := LeaseHeld(ctx, tx, opts.Owner)
			if err != nil {
				return err
			}
			if !held {
				return ErrLeaseLost
			}
		}
		// Lock the batch first, as the claim would (and CancelRun does).
		id, lookup, found, err := store.LockBatchForClaim(ctx, tx, req.Key, req.JobID)
		if err != nil || !found {
			return err
		}
		var parked []ParkedMember
		var stripped []string
		if lookup {
			var left int
			if parked, stripped, left, err = suppressMembers(ctx, tx, id, req, opts.ParkPartlySuppressed); err != nil {
				return err
			}
			if left == 0 {
				b, ok = &Batch{Key: req.Key, Parked: parked, Owner: opts.Owner}, true
				return nil
			}
		}
		if b, ok, err = claimBatch(ctx, tx, req, opts.ClaimOptions); err != nil || !ok {
			return err
		}
		b.Parked, b.Stripped = parked, stripped
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("sendstate: claim batch %q: %w", req.Key, err)
	}
	return b, ok, nil
}

// claimBatch is the claim itself, one statement, on the locked batch.
func claimBatch(ctx context.Context, tx pgx.Tx, req ClaimRequest, opts ClaimOptions) (*Batch, bool, error) {
	c, ok, err := store.ClaimBatch(ctx, tx, req.Key, req.JobID, opts.Owner, opts.KeyFingerprint, opts.ReplayWindow)
	if err != nil || !ok {
		return nil, false, err
	}
	return &Batch{Key: c.Key, Queue: c.Queue, Body: json.RawMessage(c.Body), Members: c.Members, Attempts: c.Attempts,
		Snoozes: c.Snoozes, Uncertain: c.Uncertain, APIKeyFingerprint: c.APIKeyFingerprint,
		FirstAttemptAt: c.FirstAttemptAt, WindowLeft: c.WindowLeft, Owner: opts.Owner}, true, nil
}

// suppressMembers applies the suppression list to the locked batch id
// before its first attempt (see ClaimBatch), and rewrites its body and
// members when it took any out. It returns the members parked, those
// stripped of recipients, and how many members the batch keeps.
//
// It is long because it is one transaction's statements in the order they
// lock and write; split up, that order would be harder to check.
func suppressMembers(ctx context.Context, tx pgx.Tx, id int64, req ClaimRequest, parkPartly bool) (parked []ParkedMember, stripped []string, left int, err error) {
	body, keys, err := store.BatchBody(ctx, tx, id)
	if err != nil {
		return nil, nil, 0, err
	}
	// The members are locked after their batch, in the order of ids.
	hits, err := store.LockSuppressedMembers(ctx, tx, keys, req.Key)
	if err != nil {
		return nil, nil, 0, err
	}
	found := make(map[string]store.SuppressedMember, len(hits))
	for _, h := range hits {
		found[h.Key] = h
	}
	if len(found) == 0 {
		return nil, nil, len(keys), nil
	}

	var top struct {
		Emails []json.RawMessage `json:"emails"`
	}
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		return nil, nil, 0, fmt.Errorf("read the batch's body: %w", err)
	}
	if len(top.Emails) != len(keys) {
		return nil, nil, 0, fmt.Errorf("the batch's body holds %d emails for %d members", len(top.Emails), len(keys))
	}
	var keptKeys []string
	var kept []json.RawMessage
	for i, key := range keys {
		h, ok := found[key]
		if !ok {
			keptKeys, kept = append(keptKeys, key), append(kept, top.Emails[i])
			continue
		}
		out, none, serr := suppress.Strip("email", top.Emails[i], h.Addrs)
		p := ParkedMember{Key: key}
		switch {
		case serr != nil:
			p.Failed, p.Reason = true, fmt.Sprintf("%v: cannot take the suppressed recipients out", serr)
		case none:
			p.Reason = reasonAllSuppressed
		case parkPartly:
			p.Reason = reasonPartlySuppressed
		default:
			// Sent within the batch without them; stored as a single
			// send's first claim stores them.
			if err := store.SetMemberSuppressed(ctx, tx, key, req.Key, h.Addrs); err != nil {
				return nil, nil, 0, err
			}
			keptKeys, kept = append(keptKeys, key), append(kept, out)
			stripped = append(stripped, key)
			continue
		}
		if err := parkMember(ctx, tx, req.Key, h.JobID, p, h.Addrs); err != nil {
			return nil, nil, 0, err
		}
		parked = append(parked, p)
	}
	if len(kept) == 0 {
		return parked, nil, 0, store.SplitBatchByID(ctx, tx, id, reasonBatchSuppressed)
	}
	if len(parked) > 0 || len(stripped) > 0 {
		nb := []byte(`{"emails":[`)
		for i, e := range kept {
			if i > 0 {
				nb = append(nb, ',')
			}
			nb = append(nb, e...)
		}
		nb = append(nb, "]}"...)
		if err := store.RewriteBatch(ctx, tx, id, string(nb), keptKeys); err != nil {
			return nil, nil, 0, err
		}
	}
	return parked, stripped, len(kept), nil
}

// parkMember takes a member (whose job is jobID) out of batch before the
// batch's first attempt and parks it: suppressed as a single send is
// (MarkSuppressed, with the addresses found), or failed.
func parkMember(ctx context.Context, tx pgx.Tx, batch string, jobID int64, p ParkedMember, addrs []string) error {
	if err := store.UnbindMember(ctx, tx, p.Key, batch, addrs); err != nil {
		return err
	}
	o := Outcome{Key: p.Key, JobID: jobID, Reason: p.Reason}
	if p.Failed {
		return MarkFailed(ctx, tx, o)
	}
	return MarkSuppressed(ctx, tx, o)
}

// ErrSuperseded is returned by a record of a batch's attempt that a later
// claim of the batch has superseded: River ran the batch's job again beside
// it (a completion the database's outage delayed, or River's rescuer, made
// the job available while this run was sending), and the later run holds
// the batch now. Nothing is recorded: the later run sends the same body
// under the same key, and records the API's answer, a replay of what this
// run delivered.
var ErrSuperseded = errors.New("sendstate: a later claim of the batch superseded this attempt (its job ran again beside it); " +
	"nothing was recorded: the later attempt records the API's answer")

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
//
// With an owner (the lease epoch of the batch's claim) it records only
// while the batch's claim is the owner's and the lease is held, or the
// batch was parked failed (see MarkSentMany); otherwise it records nothing
// and returns ErrLeaseLost. With attempt (the claim's Batch.Attempts) it
// records only while the batch was not claimed again since, or was parked
// failed; otherwise it records nothing and returns ErrSuperseded: of two
// runs of the batch's job at once, the later claim's answer is the one
// recorded. The batch is locked first, as a rescue locks it.
func RecordBatch(ctx context.Context, db *pgxpool.Pool, key string, owner int32, attempt int, sent []Sent, failed []ItemFailure) (overrode []string, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		h, found, err := store.LockBatchForRecord(ctx, tx, key, owner, attempt)
		if err != nil {
			return err
		}
		if !found {
			// No such batch: it is not failed nor the owner's, and no
			// later claim superseded the attempt.
			h = store.BatchHold{Current: true}
		}
		switch {
		case h.Failed:
		case !h.Owned && owner != 0:
			return ErrLeaseLost
		case !h.Current:
			return ErrSuperseded
		}
		for i := range sent {
			sent[i].Owner = owner
		}
		if len(sent) > 0 {
			var err error
			if overrode, _, err = MarkSentMany(ctx, tx, sent); err != nil {
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
			if err := captureStatus(ctx, tx, func(db DB) error {
				return store.FailBatchMembers(ctx, db, key, keys, reasons, uncertain)
			}); err != nil {
				return err
			}
		}
		return store.MarkBatchSent(ctx, tx, key)
	})
	if err != nil {
		return nil, fmt.Errorf("sendstate: record batch %q: %w", key, err)
	}
	return overrode, nil
}

// MarkBatchPending puts a batch and its unsettled members back to pending
// after an attempt that will be tried again. Only the batch's job may, and
// with o.Attempt only while no later claim superseded it (see RecordBatch).
func MarkBatchPending(ctx context.Context, db DB, o Outcome) error {
	return markBatch(ctx, db, "pending", o)
}

// MarkBatchFailed parks a batch and its unsettled members as failed. Only
// the batch's job may, and with o.Attempt only while no later claim
// superseded it (see RecordBatch).
func MarkBatchFailed(ctx context.Context, db DB, o Outcome) error {
	return markBatch(ctx, db, "failed", o)
}

func markBatch(ctx context.Context, db DB, state string, o Outcome) error {
	err := captureStatus(ctx, db, func(db DB) error { return store.MarkBatch(ctx, db, state, o) })
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
// its own key and job; a part of one is unbound and handed to the drain
// (job_id NULL), to be sent alone; a part with Failed is that member parked as failed. The
// batch becomes split with the reason. Only the batch's job may split it
// (with an owner, only under its lease: see MarkSentMany; with o.Attempt,
// only while no later claim superseded it: see RecordBatch); it returns the
// new batches' keys, or ok false when the job may not.
//
// An uncertain batch (an earlier attempt may have reached the API) is
// never split: the API may hold its delivery under the batch's key, and
// its members sent under new keys would be delivered twice. Split refuses
// it with ErrSplitUncertain and changes nothing.
//
// It is long because it is one transaction's statements in the order they
// lock and write; split up, that order would be harder to check.
func (b *Batcher) Split(ctx context.Context, o Outcome, parts []SplitPart) (keys []string, ok bool, err error) {
	err = pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		queue, run, uncertain, found, err := store.LockBatchForSplit(ctx, tx, o.Key, o.JobID, o.Owner, o.Attempt)
		if err != nil || !found {
			return err
		}
		if uncertain {
			return ErrSplitUncertain
		}
		if err := store.SplitBatch(ctx, tx, o.Key, o.Reason); err != nil {
			return err
		}
		ok = true
		// The run was cancelled while the batch was in flight: CancelRun
		// left its members, whose send had started. The refusal proves
		// nothing of them was sent, so they are as unsent as before their
		// batch, and a cancelled run sends none of them (found by the
		// whole-system test, seed 1015). The run's row is read FOR SHARE,
		// as Freeze reads it, so a CancelRun in progress is waited for.
		if run != "" {
			runState, err := store.ShareRun(ctx, tx, run)
			if err != nil {
				return fmt.Errorf("read the batch's run: %w", err)
			}
			if runState == "canceled" {
				return captureStatus(ctx, tx, func(db DB) error {
					return store.CancelBatchMembers(ctx, db, o.Key, allMembers(parts),
						o.Reason+"; not sent, and not sent again: its run was canceled")
				})
			}
		}
		for _, p := range parts {
			// What the batch's first claim found suppressed goes with its
			// first attempt: the part's own first claim looks again.
			released, err := store.UnbindBatchMembers(ctx, tx, p.Members, o.Key)
			if err != nil {
				return err
			}
			byKey := make(map[string]member, len(released))
			for _, r := range released {
				byKey[r.Key] = member{id: r.ID, key: r.Key, payload: r.Payload}
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
				if err := captureStatus(ctx, tx, func(db DB) error { return store.FailIntents(ctx, db, ids, p.Failed) }); err != nil {
					return err
				}
			case len(ids) == 1:
				// Alone: back to the drain (no River job), which claims it
				// at once, and is woken for it when this commits.
				if err := store.HandToDrain(ctx, tx, ids[0]); err != nil {
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

// allMembers lists the members of every part.
func allMembers(parts []SplitPart) []string {
	var keys []string
	for _, p := range parts {
		keys = append(keys, p.Members...)
	}
	return keys
}

// PeekBatch tells a batch job that could not claim its batch where the
// batch stands. It returns pgx.ErrNoRows wrapped when there is none.
func PeekBatch(ctx context.Context, db DB, key string) (state string, jobID *int64, err error) {
	state, jobID, err = store.PeekBatch(ctx, db, key)
	if err != nil {
		return "", nil, fmt.Errorf("sendstate: peek batch %q: %w", key, err)
	}
	return state, jobID, nil
}
