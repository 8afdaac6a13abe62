package store

import (
	"context"
	"time"
)

// The statements of package webhook's Handler: a delivery of the API's
// webhooks stored once per event id and applied, in one transaction.

// webhookStoreWebhookEventSQL stores event $2 (delivery $1, type $3, email $4,
// occurred $5, body $6 as JSON text) unless it was stored already.
const webhookStoreWebhookEventSQL = `INSERT INTO sendonce_event (delivery_id, event_id, type, email_id, occurred_at, raw)
			VALUES ($1, $2, $3, $4, coalesce($5, now()), $6::text::jsonb)
			ON CONFLICT (event_id) DO NOTHING RETURNING true`

// StoreWebhookEvent stores a webhook event, keyed by its event id (from the
// signed body, not the delivery header), unless it was stored already. Its
// error is pgx.ErrNoRows when it was (a duplicate), the database's
// otherwise, unwrapped; occurredAt nil is the database's now().
func StoreWebhookEvent(ctx context.Context, db DB, deliveryID, eventID, typ string, emailID *string, occurredAt *time.Time, body string) error {
	var inserted bool
	return db.QueryRow(ctx, webhookStoreWebhookEventSQL, deliveryID, eventID, typ, emailID, occurredAt, body).Scan(&inserted)
}

// webhookApplyWebhookEventSQL matches event $1 to the intent with its message id
// (if one is recorded yet), updating its delivery status, then applies
// the event to the suppression list: match first, since an event without
// addresses of its own suppresses the recipients of the intent it matched.
// Last, the runs the breaker paused in the transaction (migration 00033).
const webhookApplyWebhookEventSQL = `SELECT m, (SELECT idempotency_key FROM sendonce_outbox WHERE id = m), sendonce_event_suppress($1),
			coalesce(current_setting('sendonce.breaker_trips', true), '')
			FROM sendonce_event_match($1) AS m`

// ApplyWebhookEvent matches the stored event eventID to its intent and applies
// it (webhookApplyWebhookEventSQL). It returns the matched intent's id and key
// (nil when none matched), how many addresses the event put on or took
// off the suppression list, and the runs the breaker paused in the
// transaction so far (see BreakerTrips). The error is the database's,
// unwrapped.
func ApplyWebhookEvent(ctx context.Context, db DB, eventID string) (intentID *int64, key *string, suppressed int, trips []BreakerTrip, _ error) {
	var noted string
	err := db.QueryRow(ctx, webhookApplyWebhookEventSQL, eventID).Scan(&intentID, &key, &suppressed, &noted)
	return intentID, key, suppressed, BreakerTrips(noted), err
}
