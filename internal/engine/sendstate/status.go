package sendstate

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/status"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// statusHookKey is the context key of a status hook (WithStatusHook).
type statusHookKey struct{}

// WithStatusHook returns ctx carrying hook: the statements of this package
// that record transitions under it do so in a transaction in which they
// call hook with what they recorded, before it commits (see
// outbox.StatusHook). A worker carries its hook so into everything it
// runs, as River carries its client into a job's context.
func WithStatusHook(ctx context.Context, hook outbox.StatusHook) context.Context {
	if hook == nil {
		return ctx
	}
	return context.WithValue(ctx, statusHookKey{}, hook)
}

// statusHook is ctx's status hook, nil when it carries none.
func statusHook(ctx context.Context) outbox.StatusHook {
	h, _ := ctx.Value(statusHookKey{}).(outbox.StatusHook)
	return h
}

// beginner is a DB that can begin a transaction: a pool, a connection.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// recordWithHook runs record, and then hook with the statuses it returns,
// in one transaction: db's own when it is one (the caller's, which
// commits), else one begun on db. An error of either rolls back both
// (the caller's transaction is left to the caller to roll back).
func recordWithHook(ctx context.Context, db DB, hook outbox.StatusHook, record func(DB) ([]outbox.Status, error)) error {
	run := func(tx pgx.Tx) error {
		statuses, err := record(tx)
		if err != nil || len(statuses) == 0 {
			return err
		}
		if err := hook(ctx, tx, statuses); err != nil {
			return fmt.Errorf("status hook: %w", err)
		}
		return nil
	}
	if tx, ok := db.(pgx.Tx); ok {
		return run(tx)
	}
	b, ok := db.(beginner)
	if !ok {
		return fmt.Errorf("sendstate: a status hook needs a transaction, and %T cannot begin one", db)
	}
	return pgx.BeginFunc(ctx, b, run)
}

// recordStatus runs record, a statement moving intents to t: with ctx's
// status hook, asked for the rows it moved (status), in a transaction
// with the hook (recordWithHook); without, as it is.
func recordStatus(ctx context.Context, db DB, t outbox.Transition, record func(db DB, status bool) ([]store.StatusRow, error)) error {
	hook := statusHook(ctx)
	if hook == nil {
		_, err := record(db, false)
		return err
	}
	return recordWithHook(ctx, db, hook, func(db DB) ([]outbox.Status, error) {
		rows, err := record(db, true)
		if err != nil {
			return nil, err
		}
		return statusesOf(t, rows), nil
	})
}

// statusesOf are the statuses of rows moved to t.
func statusesOf(t outbox.Transition, rows []store.StatusRow) []outbox.Status {
	out := make([]outbox.Status, len(rows))
	for i, r := range rows {
		out[i] = status.Of(t, r.Key, r.Kind, r.RunKey, r.Tenant, r.MessageID, r.Tags)
	}
	return out
}

// captureStatus runs record, statements that may move intents to any of
// the transitions: with ctx's status hook, in a transaction with the hook,
// told of what the statements moved as the outbox's capture trigger found
// it (store.CaptureStatuses); without, as it is. The capture costs two
// statements, so the marks of the hot path return their rows instead
// (recordStatus).
func captureStatus(ctx context.Context, db DB, record func(db DB) error) error {
	hook := statusHook(ctx)
	if hook == nil {
		return record(db)
	}
	return recordWithHook(ctx, db, hook, func(db DB) ([]outbox.Status, error) {
		return status.Capture(ctx, db, func() error { return record(db) })
	})
}
