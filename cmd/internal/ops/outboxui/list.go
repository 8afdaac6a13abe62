package outboxui

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// pageSize is the intents on one page of the list.
const pageSize = 50

// timeLayout is the format of the list's time filters: an HTML
// datetime-local input's, read as UTC.
const timeLayout = "2006-01-02T15:04"

// filter is the list page's query, as the form shows it.
type filter struct {
	State, Delivery, Kind, Prefix, Run, From, To string
	Before                                       int64 // the list is newest first: the next page's ids are below this
}

// listData is the list page.
type listData struct {
	Filter     filter
	States     []outbox.State
	Deliveries []outbox.DeliveryStatus
	Kinds      []outbox.Kind
	Intents    []listRow
	Next       string // the next page's address; "" on the last
	Error      string // a filter that could not be read
	// RetryHint says how to retry when the page lists failed intents and
	// cannot retry them itself (read-only).
	RetryHint bool
}

// listRow is an intent as the list shows it: the record, when its job last
// attempted it, and whether it is scheduled (pending, not due yet).
type listRow struct {
	*outbox.Record
	LastAttempt *time.Time
	Scheduled   bool
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := filter{State: q.Get("state"), Delivery: q.Get("delivery"), Kind: q.Get("kind"),
		Prefix: strings.TrimSpace(q.Get("prefix")), Run: strings.TrimSpace(q.Get("run")), From: q.Get("from"), To: q.Get("to")}
	d := &listData{Filter: f, States: outbox.States, Deliveries: outbox.DeliveryStatuses,
		Kinds:     []outbox.Kind{outbox.KindEmail, outbox.KindBatch, outbox.KindTemplate, outbox.KindBroadcast},
		RetryHint: !h.opts.Actions && (f.State == string(outbox.StateFailed) || f.State == string(outbox.StateSuppressed))}
	p, err := f.params(q.Get("before"))
	if err != nil {
		d.Error = err.Error()
		h.render(w, r, http.StatusBadRequest, "list", "Intents", d)
		return
	}
	d.Filter.Before = p.BeforeID
	recs, err := h.ob.List(r.Context(), &p)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Cannot list intents", err)
		return
	}
	if d.Intents, err = h.listRows(r.Context(), recs); err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Cannot list intents", err)
		return
	}
	if len(recs) == pageSize {
		d.Next = query("state", f.State, "delivery", f.Delivery, "kind", f.Kind, "prefix", f.Prefix, "run", f.Run,
			"from", f.From, "to", f.To, "before", recs[len(recs)-1].ID)
	}
	h.render(w, r, http.StatusOK, "list", "Intents", d)
}

// listRows adds to each intent the time its River job last attempted it
// (one query for the page; a job River has cleaned away leaves it empty)
// and whether it is scheduled, by the database's clock.
func (h *Handler) listRows(ctx context.Context, recs []*outbox.Record) ([]listRow, error) {
	var ids []int64
	for _, rec := range recs {
		if rec.JobID != nil {
			ids = append(ids, *rec.JobID)
		}
	}
	attempted := map[int64]time.Time{}
	var now time.Time
	rows, err := store.PageReadJobAttempts(ctx, h.pool, ids)
	if err != nil {
		return nil, fmt.Errorf("outboxui: last attempts: %w", err)
	}
	for _, row := range rows {
		now = row.Now
		if row.AttemptedAt != nil {
			attempted[row.ID] = *row.AttemptedAt
		}
	}
	out := make([]listRow, len(recs))
	for i, rec := range recs {
		out[i] = listRow{Record: rec, Scheduled: rec.State == outbox.StatePending && rec.SendAt != nil && rec.SendAt.After(now)}
		if rec.JobID != nil && rec.Attempts > 0 {
			if at, ok := attempted[*rec.JobID]; ok {
				out[i].LastAttempt = &at
			}
		}
	}
	return out, nil
}

// params reads the filter, refusing what it cannot read with a message
// that names the field.
func (f filter) params(before string) (outbox.ListParams, error) {
	p := outbox.ListParams{State: outbox.State(f.State), Delivery: outbox.DeliveryStatus(f.Delivery),
		Kind: outbox.Kind(f.Kind), KeyPrefix: f.Prefix, Run: f.Run, Limit: pageSize, Newest: true}
	if p.State != "" && !p.State.Valid() {
		return p, fmt.Errorf("unknown state %q", f.State)
	}
	if p.Delivery != "" && !p.Delivery.Valid() {
		return p, fmt.Errorf("unknown delivery status %q", f.Delivery)
	}
	if p.Kind != "" && !p.Kind.Valid() {
		return p, fmt.Errorf("unknown kind %q", f.Kind)
	}
	if len(f.Prefix) > 255 {
		return p, fmt.Errorf("key prefix: at most 255 characters, got %d", len(f.Prefix))
	}
	var err error
	if p.CreatedFrom, err = parseTime("from", f.From); err != nil {
		return p, err
	}
	if p.CreatedBefore, err = parseTime("to", f.To); err != nil {
		return p, err
	}
	if before != "" {
		if p.BeforeID, err = strconv.ParseInt(before, 10, 64); err != nil || p.BeforeID < 1 {
			return p, fmt.Errorf("before: want an intent id, got %q", before)
		}
	}
	return p, nil
}

func parseTime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{timeLayout, timeLayout + ":05", time.RFC3339} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: want a time such as 2026-11-30T14:05 (UTC), got %q", field, v)
}
