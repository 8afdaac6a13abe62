package store

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of package outbox's suppression list (suppression.go)
// and topic unsubscribes (unsubscribe.go), as an operator or the
// unsubscribe endpoint changes and reads them.

// outboxSuppressSQL puts addresses $1 on the suppression list by hand,
// with source $2. A change by hand is made now, later than every event
// before it: an older suppression.removed arriving after it does not undo
// it.
const outboxSuppressSQL = `SELECT sendonce_suppression_set($1, false, 'manual', nullif($2, ''), NULL)`

// outboxUnsuppressSQL takes addresses $1 off the suppression list, made
// now, as outboxSuppressSQL: an older bounce arriving after it does not put
// the address back.
const outboxUnsuppressSQL = `SELECT sendonce_suppression_set($1, true, NULL, NULL, NULL)`

// SuppressAddresses puts addrs (normal forms) on the suppression list by hand
// (reason manual, source "" is none) and returns how many were added; an
// address already on it keeps its entry. The error is the database's,
// unwrapped.
func SuppressAddresses(ctx context.Context, db DB, addrs []string, source string) (int, error) {
	var added int
	err := db.QueryRow(ctx, outboxSuppressSQL, addrs, source).Scan(&added)
	return added, err
}

// UnsuppressAddresses takes addrs (normal forms) off the suppression list and
// returns how many were on it. The error is the database's, unwrapped.
func UnsuppressAddresses(ctx context.Context, db DB, addrs []string) (int, error) {
	var removed int
	err := db.QueryRow(ctx, outboxUnsuppressSQL, addrs).Scan(&removed)
	return removed, err
}

// SuppressionRow is an address on the suppression list.
type SuppressionRow struct {
	Address, Reason, Source string
	CreatedAt               time.Time
}

// outboxSuppressionsSQL pages the suppression list in address order.
const outboxSuppressionsSQL = `SELECT address, reason, coalesce(source, ''), created_at FROM sendonce_suppression
		WHERE ($1 = '' OR reason = $1) AND address > $2 ORDER BY address LIMIT $3`

// ListSuppressions returns at most limit addresses of the suppression list
// after after, in address order, only those suppressed for reason unless
// it is "". The error is the database's, unwrapped.
func ListSuppressions(ctx context.Context, db DB, reason, after string, limit int) ([]SuppressionRow, error) {
	rows, err := db.Query(ctx, outboxSuppressionsSQL, reason, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (SuppressionRow, error) {
		var s SuppressionRow
		err := r.Scan(&s.Address, &s.Reason, &s.Source, &s.CreatedAt)
		return s, err
	})
}

// outboxUnsubscribeSQL unsubscribes address $1 from topic $2 (source $3)
// and records the change as an event, when it was not unsubscribed; it
// answers whether it changed anything.
const outboxUnsubscribeSQL = `WITH i AS (
			INSERT INTO sendonce_unsubscribe (address, topic, source) VALUES ($1, $2, $3)
			ON CONFLICT (address, topic) DO NOTHING RETURNING address),
		e AS (
			INSERT INTO sendonce_unsubscribe_event (address, topic, action, source)
			SELECT $1, $2, 'unsubscribed', $3 FROM i RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM e)`

// outboxResubscribeSQL takes address $1's unsubscribe from topic $2 back
// (an event too, source $3); it answers whether there was one.
const outboxResubscribeSQL = `WITH d AS (
			DELETE FROM sendonce_unsubscribe WHERE address = $1 AND topic = $2 RETURNING address),
		e AS (
			INSERT INTO sendonce_unsubscribe_event (address, topic, action, source)
			SELECT $1, $2, 'resubscribed', $3 FROM d RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM e)`

// UnsubscribeAddress unsubscribes address (a normal form) from topic, recording
// the change as an event with source, and reports whether it was not
// unsubscribed already. The error is the database's, unwrapped.
func UnsubscribeAddress(ctx context.Context, db DB, address, topic, source string) (bool, error) {
	var changed bool
	err := db.QueryRow(ctx, outboxUnsubscribeSQL, address, topic, source).Scan(&changed)
	return changed, err
}

// ResubscribeAddress takes address's unsubscribe from topic back, recording the
// change as an event with source, and reports whether there was one. The
// error is the database's, unwrapped.
func ResubscribeAddress(ctx context.Context, db DB, address, topic, source string) (bool, error) {
	var changed bool
	err := db.QueryRow(ctx, outboxResubscribeSQL, address, topic, source).Scan(&changed)
	return changed, err
}

// UnsubscribeRow is an address unsubscribed from a topic.
type UnsubscribeRow struct {
	Address, Topic, Source string
	CreatedAt              time.Time
}

// outboxUnsubscriptionsSQL pages the unsubscribes in topic and address
// order: of topic $1 after address $2, or, $1 empty, of every topic after
// ($4, $2), compared as a row as ORDER BY sorts them. (PostgreSQL's text
// holds no NUL, so the cursor's "topic\x00address" is split in Go.)
const outboxUnsubscriptionsSQL = `SELECT address, topic, source, created_at FROM sendonce_unsubscribe
		WHERE ($1 = '' OR topic = $1) AND CASE WHEN $1 = '' THEN (topic, address) > ($4, $2) ELSE address > $2 END
		ORDER BY topic, address LIMIT $3`

// ListUnsubscriptions returns at most limit unsubscribes in topic and address
// order, of topic unless it is "", after after (an address in topic, or
// "topic\x00address" when topic is ""). The error is the database's,
// unwrapped.
func ListUnsubscriptions(ctx context.Context, db DB, topic, after string, limit int) ([]UnsubscribeRow, error) {
	afterTopic := ""
	if topic == "" {
		afterTopic, after, _ = strings.Cut(after, "\x00")
	}
	rows, err := db.Query(ctx, outboxUnsubscriptionsSQL, topic, after, limit, afterTopic)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (UnsubscribeRow, error) {
		var u UnsubscribeRow
		err := r.Scan(&u.Address, &u.Topic, &u.Source, &u.CreatedAt)
		return u, err
	})
}

// TopicUnsubscribeCount is one topic's unsubscribes: how many addresses
// are unsubscribed now, and how many unsubscribed in the last day.
type TopicUnsubscribeCount struct {
	Topic        string
	Now, LastDay int64
}

// outboxUnsubscribesByTopicSQL counts the unsubscribes of each topic.
const outboxUnsubscribesByTopicSQL = `SELECT topic, sum(n)::int8, sum(d)::int8 FROM (
			SELECT topic, 1 AS n, 0 AS d FROM sendonce_unsubscribe
			UNION ALL
			SELECT topic, 0, 1 FROM sendonce_unsubscribe_event
			WHERE action = 'unsubscribed' AND created_at > now() - interval '1 day') x
		GROUP BY topic ORDER BY topic`

// CountUnsubscribesByTopic counts the unsubscribes of each topic, by topic. The
// error is the database's, unwrapped.
func CountUnsubscribesByTopic(ctx context.Context, db DB) ([]TopicUnsubscribeCount, error) {
	rows, err := db.Query(ctx, outboxUnsubscribesByTopicSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TopicUnsubscribeCount, error) {
		var t TopicUnsubscribeCount
		err := r.Scan(&t.Topic, &t.Now, &t.LastDay)
		return t, err
	})
}
