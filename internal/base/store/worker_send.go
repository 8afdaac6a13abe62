package store

import (
	"context"
	"encoding/json"
)

// The statements of the worker's send (package worker) on sendonce_outbox
// beside the engine's claim and record: the unsubscribe headers frozen on
// the row, and a batch's members' trace context.

// workerFreezeListUnsubscribeSQL freezes the List-Unsubscribe headers ($2)
// on an intent's row. The first writer wins: a claim that overlapped this
// one (a crash's rescue) sends what was frozen first.
const workerFreezeListUnsubscribeSQL = `UPDATE sendonce_outbox SET list_unsubscribe = coalesce(list_unsubscribe, $2::jsonb)
			WHERE id = $1 RETURNING list_unsubscribe`

// WorkerFreezeListUnsubscribe freezes headers (JSON) as the
// List-Unsubscribe headers of the intent id, unless some are frozen
// already, and returns those on the row. The error is the statement's,
// unwrapped (the caller names the intent).
func WorkerFreezeListUnsubscribe(ctx context.Context, db DB, id int64, headers string) (json.RawMessage, error) {
	var frozen json.RawMessage
	err := db.QueryRow(ctx, workerFreezeListUnsubscribeSQL, id, headers).Scan(&frozen)
	return frozen, err
}

// WorkerTraceContext is the trace context an intent was enqueued with
// (traceparent, and tracestate or "").
type WorkerTraceContext struct {
	Parent, State string
}

// workerTraceContextsSQL reads the trace context of the intents with the
// keys $1 that have one, in the order they were enqueued.
const workerTraceContextsSQL = `SELECT traceparent, coalesce(tracestate, '') FROM sendonce_outbox
		WHERE idempotency_key = ANY($1) AND traceparent IS NOT NULL ORDER BY id`

// WorkerTraceContexts returns the trace context of each intent of keys that
// has one, in the order they were enqueued. The error is the statement's,
// unwrapped (the caller names the batch).
func WorkerTraceContexts(ctx context.Context, db DB, keys []string) ([]WorkerTraceContext, error) {
	rows, err := db.Query(ctx, workerTraceContextsSQL, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []WorkerTraceContext
	for rows.Next() {
		var c WorkerTraceContext
		if err := rows.Scan(&c.Parent, &c.State); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
