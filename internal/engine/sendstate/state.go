// Package sendstate is the worker's side of an intent's lifecycle: claiming
// an intent for an attempt, recording the attempt's outcome, and giving a new
// River job to intents left without a working one. Producers and operators
// use package outbox; this is machinery behind package worker.
//
// Each function that moves one intent is one statement, so each is atomic
// on its own.
//
// An intent's row names the one River job that may send it (job_id). A job
// that is not that job (a job revived after Retry or after the reconciler
// gave the intent a new one) claims nothing and records nothing but a
// success, so two jobs never run one intent's send at once by design.
//
// Its statements are package store's (internal/base/store, the files
// engine_*.go): this package decides what to claim and record, and in
// which transaction, and store runs the SQL.
package sendstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/status"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// DB is a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB = store.DB

// record is the outbox's Record of an intent a claim read.
func record(in *store.Intent) *outbox.Record {
	return &outbox.Record{
		ID: in.ID, Key: in.Key, Kind: outbox.Kind(in.Kind), Payload: in.Payload, TemplateID: in.TemplateID,
		SendAt: in.SendAt, State: outbox.State(in.State), Attempts: in.Attempts, MessageID: in.MessageID,
		Replayed: in.Replayed, LastError: in.LastError, JobID: in.JobID, FirstAttemptAt: in.FirstAttemptAt,
		Uncertain: in.Uncertain, Snoozes: in.Snoozes, APIKeyFingerprint: in.APIKeyFingerprint,
		ForcedRetryAt: in.ForcedRetryAt, ClaimedBy: in.ClaimedBy, BatchKey: in.BatchKey,
		DeliveryStatus: outbox.DeliveryStatus(in.DeliveryStatus), DeliveryStatusAt: in.DeliveryStatusAt,
		SuppressedRecipients: in.SuppressedRecipients, TraceParent: in.TraceParent, TraceState: in.TraceState,
		Topic: in.Topic, ListUnsubscribe: in.ListUnsubscribe, PrunedAt: in.PrunedAt,
		CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt, SentAt: in.SentAt,
	}
}

// ClaimRequest names an intent and the River job that wants to send it.
type ClaimRequest struct {
	Key   string
	JobID int64
}

// ClaimOptions are the claiming worker's identity and limits.
type ClaimOptions struct {
	// Owner is the epoch of the claiming worker instance's lease (see
	// Lease), recorded in claimed_by, or 0 for a send without a lease. A
	// claim under a lease that has ended claims nothing and returns
	// ErrLeaseLost.
	Owner int32
	// KeyFingerprint identifies the API key the send will use.
	KeyFingerprint string
	// ReplayWindow is measured from the first attempt, on the database's
	// clock.
	ReplayWindow time.Duration
	// Queue is the queue whose intents ClaimDue claims ("" is
	// outbox.DefaultQueue).
	Queue string
	// CoalesceWait, when positive, is the coalesce wait: ClaimDue holds a
	// due email intent that was never attempted and is in no batch for it
	// and CoalesceGrace, counted from its due time: meanwhile
	// Batcher.FreezeDue may gather it into a batch with others, and only
	// then is the intent claimed alone. Zero: coalescing is off, and
	// nothing is held.
	CoalesceWait time.Duration
}

// Claimed is an intent claimed for one attempt: the fields a send needs.
type Claimed struct {
	Record *outbox.Record
	// WindowLeft is what remains of the replay window, measured by the
	// database's clock at the claim: zero or less when it has run out.
	WindowLeft time.Duration
	// Owner is the lease epoch the claim was made under (ClaimOptions.Owner):
	// the records of this attempt carry it.
	Owner int32
}

// ClaimMany marks the intents of many jobs as being sent in one statement:
// one more attempt, the first attempt's time stamped (the start of its
// replay window), the owner and API key recorded. An intent left in sending
// by a crashed worker is claimed again, and marked uncertain: that is how a
// crash turns into a replay. The result holds the claims made, by job id; a
// job it does not hold may not send (its intent is settled, gone, or owned
// by another job): ask Peek about it.
//
// It is one UPDATE joined to the requests, in key order, so that
// concurrent claims lock their rows in one order: store.ClaimIntents, whose
// statement (and why it is written so) is told there.
//
// With an owner, the claim is made only while the owner's lease is held
// (one more condition, evaluated once per statement); when it claimed fewer
// intents than asked, it reads the lease, and returns ErrLeaseLost if it has
// ended, so the jobs run again instead of taking their intents for settled.
//
// The first claim of an intent (no first attempt yet) looks its recipients
// up on the suppression list and stores what it finds (NULL: none) with
// the claim, so that every attempt sends the same body. An intent with a
// topic is looked up on the unsubscribes of its topic too: an address
// unsubscribed from it is suppressed for it alone.
func ClaimMany(ctx context.Context, db DB, reqs []ClaimRequest, opts ClaimOptions) (map[int64]*Claimed, error) {
	sorted := slices.SortedFunc(slices.Values(reqs), func(a, b ClaimRequest) int { return strings.Compare(a.Key, b.Key) })
	keys := make([]string, len(sorted))
	jobIDs := make([]int64, len(sorted))
	for i, r := range sorted {
		keys[i], jobIDs[i] = r.Key, r.JobID
	}
	claims, err := store.ClaimIntents(ctx, db, keys, jobIDs, opts.Owner, opts.KeyFingerprint, opts.ReplayWindow)
	if err != nil {
		return nil, fmt.Errorf("sendstate: claim: %w", err)
	}
	out := make(map[int64]*Claimed, len(reqs))
	for i := range claims {
		c := &claims[i]
		out[*c.JobID] = &Claimed{Record: record(&c.Intent), WindowLeft: c.WindowLeft, Owner: opts.Owner}
	}
	if opts.Owner != 0 && len(out) < len(reqs) {
		ok, err := LeaseHeld(ctx, db, opts.Owner)
		if err != nil {
			return nil, fmt.Errorf("sendstate: claim: %w", err)
		}
		if !ok {
			return nil, fmt.Errorf("sendstate: claim: %w", ErrLeaseLost)
		}
	}
	return out, nil
}

// Claim is ClaimMany for one job. ok is false when the job may not send;
// Peek says why.
func Claim(ctx context.Context, db DB, req ClaimRequest, opts ClaimOptions) (c *Claimed, ok bool, err error) {
	claimed, err := ClaimMany(ctx, db, []ClaimRequest{req}, opts)
	if err != nil {
		return nil, false, err
	}
	c, ok = claimed[req.JobID]
	return c, ok, nil
}

// Peeked is what Peek tells of an intent.
type Peeked struct {
	State outbox.State
	Kind  outbox.Kind
	JobID *int64
}

// Peek tells a job that could not claim its intent where the intent stands.
// It returns an error matching outbox.ErrNotFound when there is none. It
// is alike in shape to the outbox's Get on purpose: a skipped job reads
// three columns, not the whole intent.
func Peek(ctx context.Context, db DB, key string) (*Peeked, error) {
	state, kind, jobID, err := store.PeekIntent(ctx, db, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", outbox.ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("sendstate: peek %q: %w", key, err)
	}
	return &Peeked{State: outbox.State(state), Kind: outbox.Kind(kind), JobID: jobID}, nil
}

// Sent is one API answer for MarkSentMany.
type Sent struct {
	Key       string
	MessageID string
	Replayed  bool
	// Owner is the lease epoch the attempt was claimed under (Claimed.Owner),
	// or 0 for a send without a lease.
	Owner int32
}

// MarkSentMany records the API's answers in one statement. A success is
// recorded whichever job got it, and even over a failed state: the API
// holds the delivery, and a failed row would invite an operator to send it
// again. It returns the keys that were failed before, so the caller can say
// so.
//
// An answer with an owner is recorded only while the intent's claim is the
// owner's and the owner's lease is held: a worker whose lease ended (paused
// or cut off past it, while a sweeper handed its intents on) records
// nothing over the intent's new owner. notOwned holds such answers' keys,
// and any whose intent was settled already. A failed intent is the one
// exception: its job has given up, no other send of it runs, and the
// success is the truth about it.
//
// Like ClaimMany it is one UPDATE joined to the answers, in key order:
// store.MarkIntentsSent.
func MarkSentMany(ctx context.Context, db DB, sent []Sent) (overrode, notOwned []string, err error) {
	return markSentMany(ctx, db, sent, false)
}

// MarkSentManyAsyncCommit is MarkSentMany in a transaction of its own (db a
// pool) whose commit does not wait for the WAL flush: a lone mark, which no
// claim shares. A database crash can lose such a mark after it was
// acknowledged; the intent is then sending under its claim, given back by
// the orphans' look (or a lapsed lease's rescue), and sent again under its
// key, which the API replays: never a second delivery. See
// store.MarkIntentsSent.
func MarkSentManyAsyncCommit(ctx context.Context, db DB, sent []Sent) (overrode, notOwned []string, err error) {
	return markSentMany(ctx, db, sent, true)
}

func markSentMany(ctx context.Context, db DB, sent []Sent, asyncCommit bool) (overrode, notOwned []string, err error) {
	sorted := slices.SortedFunc(slices.Values(sent), func(a, b Sent) int { return strings.Compare(a.Key, b.Key) })
	keys := make([]string, len(sorted))
	ids := make([]string, len(sorted))
	replayed := make([]bool, len(sorted))
	owners := make([]int32, len(sorted))
	for i, s := range sorted {
		keys[i], ids[i], replayed[i], owners[i] = s.Key, s.MessageID, s.Replayed, s.Owner
	}
	var marks []store.SentMark
	if hook := statusHook(ctx); hook != nil {
		err = recordWithHook(ctx, db, hook, func(db DB) ([]outbox.Status, error) {
			var err error
			if marks, err = store.MarkIntentsSent(ctx, db, keys, ids, replayed, owners, asyncCommit, true); err != nil {
				return nil, err
			}
			statuses := make([]outbox.Status, len(marks))
			for i, m := range marks {
				statuses[i] = status.Of(outbox.TransitionSent, m.Key, m.Kind, m.RunKey, m.Tenant, m.MessageID, m.Tags)
			}
			return statuses, nil
		})
	} else {
		marks, err = store.MarkIntentsSent(ctx, db, keys, ids, replayed, owners, asyncCommit, false)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sendstate: mark sent: %w", err)
	}
	recorded := make(map[string]bool, len(sorted))
	for _, m := range marks {
		recorded[m.Key] = true
		if m.WasFailed {
			overrode = append(overrode, m.Key)
		}
	}
	for _, s := range sorted {
		if s.Owner != 0 && !recorded[s.Key] {
			notOwned = append(notOwned, s.Key)
		}
	}
	return overrode, notOwned, nil
}

// MarkSent is MarkSentMany for one answer. It returns ErrLeaseLost when
// the answer, of an owner, was not recorded (see MarkSentMany).
func MarkSent(ctx context.Context, db DB, s Sent) (overrode bool, err error) {
	keys, notOwned, err := MarkSentMany(ctx, db, []Sent{s})
	if err == nil && len(notOwned) > 0 {
		err = fmt.Errorf("sendstate: mark sent %q: %w", s.Key, ErrLeaseLost)
	}
	return len(keys) > 0, err
}

// Outcome is what an attempt that did not succeed leaves on the row (see
// store.Outcome for its fields).
type Outcome = store.Outcome

// MarkFailed parks an intent as failed with the reason. Only the intent's
// own job may, and with an owner only under its lease (see MarkSentMany).
func MarkFailed(ctx context.Context, db DB, o Outcome) error {
	return mark(recordStatus(ctx, db, outbox.TransitionFailed, func(db DB, status bool) ([]store.StatusRow, error) {
		return store.MarkIntentFailed(ctx, db, o, status)
	}), "mark failed", o)
}

// MarkPending puts an intent back to pending after an attempt that will be
// tried again, with what went wrong. Only the intent's own job may, and
// with an owner only under its lease (see MarkSentMany).
func MarkPending(ctx context.Context, db DB, o Outcome) error {
	return mark(store.MarkIntentPending(ctx, db, o), "mark pending", o)
}

// KeepRateLimited, as Outcome.RateLimited, leaves an intent's count of
// 429s in a row as it is.
const KeepRateLimited = -1

// mark wraps the error of the mark op of o's intent.
func mark(err error, op string, o Outcome) error {
	if err != nil {
		return fmt.Errorf("sendstate: %s %q: %w", op, o.Key, err)
	}
	return nil
}

// MarkSuppressed parks an intent whose send must not go out because of the
// suppression list, with the reason, followed by the suppressed addresses
// and why each is on the list (its reason, or "unsubscribed from topic T"). No attempt reached the API (the first
// claim decided it), so the claim is undone: no attempts, no first attempt,
// nothing uncertain; a retry after the address is taken off the list looks
// the recipients up again. Only the intent's own job may, and
// with an owner only under its lease (see MarkSentMany).
func MarkSuppressed(ctx context.Context, db DB, o Outcome) error {
	return mark(recordStatus(ctx, db, outbox.TransitionSuppressed, func(db DB, status bool) ([]store.StatusRow, error) {
		return store.MarkIntentSuppressed(ctx, db, o, status)
	}), "mark suppressed", o)
}
