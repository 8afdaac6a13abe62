package outboxui

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

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
	After                                        int64
}

// listData is the list page.
type listData struct {
	Filter     filter
	States     []outbox.State
	Deliveries []outbox.DeliveryStatus
	Kinds      []outbox.Kind
	Intents    []*outbox.Record
	Next       string // the next page's address; "" on the last
	Error      string // a filter that could not be read
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := filter{State: q.Get("state"), Delivery: q.Get("delivery"), Kind: q.Get("kind"),
		Prefix: strings.TrimSpace(q.Get("prefix")), Run: strings.TrimSpace(q.Get("run")), From: q.Get("from"), To: q.Get("to")}
	d := &listData{Filter: f, States: outbox.States, Deliveries: outbox.DeliveryStatuses,
		Kinds: []outbox.Kind{outbox.KindEmail, outbox.KindBatch, outbox.KindTemplate, outbox.KindBroadcast}}
	p, err := f.params(q.Get("after"))
	if err != nil {
		d.Error = err.Error()
		h.render(w, r, http.StatusBadRequest, "list", "Intents", d)
		return
	}
	d.Filter.After = p.AfterID
	if d.Intents, err = h.ob.List(r.Context(), p); err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Cannot list intents", err)
		return
	}
	if len(d.Intents) == pageSize {
		d.Next = query("state", f.State, "delivery", f.Delivery, "kind", f.Kind, "prefix", f.Prefix, "run", f.Run,
			"from", f.From, "to", f.To, "after", d.Intents[len(d.Intents)-1].ID)
	}
	h.render(w, r, http.StatusOK, "list", "Intents", d)
}

// params reads the filter, refusing what it cannot read with a message
// that names the field.
func (f filter) params(after string) (outbox.ListParams, error) {
	p := outbox.ListParams{State: outbox.State(f.State), Delivery: outbox.DeliveryStatus(f.Delivery),
		Kind: outbox.Kind(f.Kind), KeyPrefix: f.Prefix, Run: f.Run, Limit: pageSize}
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
	if after != "" {
		if p.AfterID, err = strconv.ParseInt(after, 10, 64); err != nil || p.AfterID < 0 {
			return p, fmt.Errorf("after: want an intent id, got %q", after)
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
