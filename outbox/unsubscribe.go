package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/base/suppress"
)

// Unsubscription is an address unsubscribed from one topic: no intent of
// that topic goes to it, every other intent still does (a bounce or a
// complaint, on the suppression list, stops them all).
type Unsubscription struct {
	Address string `json:"address"`
	Topic   string `json:"topic"`
	// Source says where it came from: one-click (a mailbox provider's
	// RFC 8058 POST), page (the confirmation page's button), or what
	// Unsubscribe was given.
	Source    string    `json:"source"`
	CreatedAt time.Time `json:"createdAt"`
}

// The sources of an unsubscribe made by the endpoint.
const (
	UnsubscribeOneClick = "one-click"
	UnsubscribePage     = "page"
)

// Unsubscribe unsubscribes address from topic, with source saying from
// where, and records the change as an event (sendonce_unsubscribe_event).
// It is idempotent: added is false, and nothing is recorded, when the
// address was unsubscribed already. An intent of the topic first claimed
// after it commits is parked as suppressed, with no API call.
func (o *Outbox) Unsubscribe(ctx context.Context, address, topic, source string) (added bool, err error) {
	return o.changeUnsubscribe(ctx, "unsubscribe from", address, topic, source, store.UnsubscribeAddress)
}

// Resubscribe takes address's unsubscribe from topic back (an event too),
// and reports whether there was one. Intents already parked as suppressed
// stay so until retried (Retry).
func (o *Outbox) Resubscribe(ctx context.Context, address, topic, source string) (removed bool, err error) {
	return o.changeUnsubscribe(ctx, "resubscribe to", address, topic, source, store.ResubscribeAddress)
}

// changeUnsubscribe checks Unsubscribe's and Resubscribe's arguments and
// runs change, one of store's UnsubscribeAddress and ResubscribeAddress,
// on address's normal form, topic and source; change answers whether it
// changed anything. what names the change in an error.
func (o *Outbox) changeUnsubscribe(ctx context.Context, what, address, topic, source string,
	change func(ctx context.Context, db store.DB, address, topic, source string) (bool, error)) (bool, error) {
	n := suppress.Address(address)
	if n == "" {
		return false, invalid("address", fmt.Sprintf("%q %s", shorten(address), suppress.Why(address)))
	}
	if topic == "" {
		return false, invalid("topic", "needs a topic (a topic-less address is suppressed with Suppress)")
	}
	if err := ValidateTopic(topic); err != nil {
		return false, err
	}
	changed, err := change(ctx, o.pool, n, topic, source)
	if err != nil {
		return false, fmt.Errorf("outbox: %s %q: %w", what, topic, err)
	}
	return changed, nil
}

// UnsubscriptionParams filter and page Unsubscriptions.
type UnsubscriptionParams struct {
	// Topic keeps only this topic's; empty keeps all.
	Topic string
	// After pages: only entries that sort after this address (in Topic,
	// or in the topic order when Topic is empty: "topic\x00address").
	After string
	// Limit caps the result (default 100, at most 10,000).
	Limit int
}

// Unsubscriptions lists the unsubscribes in topic and address order; nil
// p lists the first 100.
func (o *Outbox) Unsubscriptions(ctx context.Context, params *UnsubscriptionParams) ([]Unsubscription, error) {
	var p UnsubscriptionParams
	if params != nil {
		p = *params
	}
	if err := ValidateTopic(p.Topic); err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	p.Limit = min(p.Limit, 10_000)
	rows, err := store.ListUnsubscriptions(ctx, o.pool, p.Topic, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: unsubscriptions: %w", err)
	}
	list := make([]Unsubscription, len(rows))
	for i, r := range rows {
		list[i] = Unsubscription{Address: r.Address, Topic: r.Topic, Source: r.Source, CreatedAt: r.CreatedAt}
	}
	return list, nil
}

// TopicUnsubscribes is one topic's unsubscribes: how many addresses are
// unsubscribed now, and how many unsubscribed in the last day.
type TopicUnsubscribes struct {
	Topic   string `json:"topic"`
	Now     int64  `json:"now"`
	LastDay int64  `json:"lastDay"`
}

// UnsubscribesByTopic counts the unsubscribes of each topic, by topic.
func (o *Outbox) UnsubscribesByTopic(ctx context.Context) ([]TopicUnsubscribes, error) {
	rows, err := store.CountUnsubscribesByTopic(ctx, o.pool)
	if err != nil {
		return nil, fmt.Errorf("outbox: unsubscribes by topic: %w", err)
	}
	out := make([]TopicUnsubscribes, len(rows))
	for i, r := range rows {
		out[i] = TopicUnsubscribes{Topic: r.Topic, Now: r.Now, LastDay: r.LastDay}
	}
	return out, nil
}
