package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/base/suppress"
)

// SuppressionReason says why an address is on the suppression list.
type SuppressionReason string

// The reasons an address is suppressed.
const (
	SuppressedBounced    SuppressionReason = "bounced"    // a hard bounce, from the delivery webhooks
	SuppressedComplained SuppressionReason = "complained" // a spam complaint, from the delivery webhooks
	SuppressedAPI        SuppressionReason = "api"        // the API's email.suppressed or suppression.added
	SuppressedManual     SuppressionReason = "manual"     // added with Suppress (sendonce suppression add)
)

// Suppression is an address on the suppression list. A worker parks an
// intent all of whose recipients are suppressed as StateSuppressed, before
// any API call, and sends a partly suppressed one without them (see
// worker.SendConfig.PartlySuppressed). The list is looked up when an
// intent is first claimed: a change after that does not change what its
// attempts send.
type Suppression struct {
	// Address is the address in its normal form: local@domain in lower
	// case (of "Name <local@domain>", the bare address).
	Address string            `json:"address"`
	Reason  SuppressionReason `json:"reason"`
	// Source is the webhook delivery that added it ("webhook <id>"), or
	// what Suppress was given.
	Source    string    `json:"source,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// suppressAddresses normalises addrs and refuses a bad one, naming it:
// the list takes the spellings an intent may name (see internal/base/suppress).
func suppressAddresses(addrs []string) ([]string, error) {
	if len(addrs) == 0 {
		return nil, invalid("address", "needs at least one address")
	}
	out := make([]string, 0, len(addrs))
	for i, a := range addrs {
		n := suppress.Address(a)
		if n == "" {
			return nil, invalid(fmt.Sprintf("address[%d]", i), fmt.Sprintf("%q %s", shorten(a), suppress.Why(a)))
		}
		out = append(out, n)
	}
	return out, nil
}

// Suppress puts addresses on the suppression list by hand (reason
// SuppressedManual), with source saying who or why (e.g. "ops: ticket
// 4192"). An address already on the list keeps its entry. It returns how
// many were added. A bad address fails the call with an *InvalidError
// naming it, and nothing is written.
func (o *Outbox) Suppress(ctx context.Context, addrs []string, source string) (added int, err error) {
	norm, err := suppressAddresses(addrs)
	if err != nil {
		return 0, err
	}
	// A change by hand is made now, later than every event before it (see
	// store.SuppressAddresses).
	added, err = store.SuppressAddresses(ctx, o.pool, norm, source)
	if err != nil {
		return 0, fmt.Errorf("outbox: suppress: %w", err)
	}
	return added, nil
}

// Unsuppress takes addresses off the suppression list, whatever put them
// there, and returns how many were on it. Intents already parked as
// suppressed stay so until retried (Retry).
func (o *Outbox) Unsuppress(ctx context.Context, addrs []string) (removed int, err error) {
	norm, err := suppressAddresses(addrs)
	if err != nil {
		return 0, err
	}
	// Made now, as Suppress (see store.UnsuppressAddresses).
	removed, err = store.UnsuppressAddresses(ctx, o.pool, norm)
	if err != nil {
		return 0, fmt.Errorf("outbox: unsuppress: %w", err)
	}
	return removed, nil
}

// SuppressionParams filter and page Suppressions.
type SuppressionParams struct {
	// Reason keeps only addresses suppressed for it; empty keeps all.
	Reason SuppressionReason
	// After pages: only addresses that sort after it.
	After string
	// Limit caps the result (default 100, at most 10,000).
	Limit int
}

// Suppressions lists the suppression list in address order; nil p lists
// the first 100.
func (o *Outbox) Suppressions(ctx context.Context, params *SuppressionParams) ([]Suppression, error) {
	var p SuppressionParams
	if params != nil {
		p = *params
	}
	switch p.Reason {
	case "", SuppressedBounced, SuppressedComplained, SuppressedAPI, SuppressedManual:
	default:
		return nil, invalid("reason", fmt.Sprintf("unknown reason %q: want bounced, complained, api or manual", p.Reason))
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	p.Limit = min(p.Limit, 10_000)
	rows, err := store.ListSuppressions(ctx, o.pool, string(p.Reason), p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: suppressions: %w", err)
	}
	list := make([]Suppression, len(rows))
	for i, r := range rows {
		list[i] = Suppression{Address: r.Address, Reason: SuppressionReason(r.Reason), Source: r.Source, CreatedAt: r.CreatedAt}
	}
	return list, nil
}
