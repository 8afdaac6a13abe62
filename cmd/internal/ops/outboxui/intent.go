package outboxui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/outbox"
)

// intentData is the intent page.
type intentData struct {
	Rec     *outbox.Record
	RunKey  string
	Emails  []emailSummary // the addresses and subject of each email it sends
	Payload string         // the whole payload, indented, collapsed on the page
	Job     *jobInfo
	JobURL  string
	// Drain is what the worker's drain holds of an intent with no River job
	// of its own (every intent enqueued since the drain); nil for one with
	// a job (a database upgraded from an earlier release).
	Drain     *drainInfo
	Events    []event
	Done      string // what an action just did
	CanRetry  bool
	CanCancel bool
	// RetryHint: the intent could be retried, and the page is read-only.
	RetryHint bool
	// Scheduled: pending and not due yet (its send time is ahead).
	Scheduled bool
	// MaxAttempts is the workers' --max-attempts, the tries shown against
	// (0: not known, shown alone).
	MaxAttempts int
}

// emailSummary is what an email's payload says of where it goes; its body
// stays in the collapsed payload.
type emailSummary struct {
	From, To, Cc, Bcc, ReplyTo, Subject string
	Extra                               string // e.g. a template id or an audience
}

type jobInfo struct {
	ID          int64
	State       string
	Attempt     int
	MaxAttempts int
	Kind        string
	AttemptedAt *time.Time // the job's last attempt
}

// drainInfo is an intent's place on the drain, from its row: the queue
// whose workers' drains send it, the try it is on as River numbers a job's
// attempts (MaxAttempts and the backoff read it), and when a retry or a
// rate-limit snooze will next let it be claimed.
type drainInfo struct {
	Queue         string
	Tries         int
	NextAttemptAt *time.Time
}

type event struct {
	DeliveryID string
	Type       string
	OccurredAt time.Time
	ReceivedAt time.Time
	Raw        string
}

// done are the notes shown after an action (by name: the page never echoes
// a text from the address).
var done = map[string]string{
	"retried": "Retried: the intent is pending again, with the same key, to be sent again.",
	"forced": "Retried with force: if an earlier attempt reached the API, the intent may be delivered a second time. " +
		"This was logged and recorded on the intent (forced retry).",
	"canceled": "Canceled: the intent will not be sent.",
}

func (h *Handler) intent(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	d, err := h.readIntent(r.Context(), key)
	switch {
	case errors.Is(err, outbox.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, "No such intent", fmt.Errorf("no intent has the key %q", key))
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "Cannot read the intent", err)
		return
	}
	d.Done = done[r.URL.Query().Get("done")]
	if r.URL.Query().Get("done") == "retried" && d.Rec.Uncertain {
		d.Done += " " + uncertainNote(d.Rec.Key)
	}
	h.render(w, r, http.StatusOK, "intent", d.Rec.Key, d)
}

// uncertainNote is `sendonce retry`'s note on an uncertain intent.
func uncertainNote(key string) string {
	return fmt.Sprintf("Note: an earlier attempt of %s may have reached the API; "+
		"within its replay window the API replays it rather than deliver it again.", key)
}

func (h *Handler) readIntent(ctx context.Context, key string) (*intentData, error) {
	rec, err := h.ob.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	d := &intentData{Rec: rec, Emails: summarize(rec), Payload: indent(rec.Payload),
		CanRetry: rec.State == outbox.StateFailed || rec.State == outbox.StateSuppressed, CanCancel: rec.Cancelable(), MaxAttempts: h.opts.MaxAttempts}
	d.RetryHint = d.CanRetry && !h.opts.Actions
	x, err := store.PageReadIntentExtra(ctx, h.pool, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("outboxui: run of %q: %w", key, err)
	}
	d.RunKey, d.Scheduled = x.RunKey, x.Scheduled
	drain := &drainInfo{Queue: x.Queue, Tries: x.Tries, NextAttemptAt: x.NextAttemptAt}
	if rec.JobID == nil {
		d.Drain = drain
	}
	if rec.JobID != nil {
		j := &jobInfo{ID: *rec.JobID}
		job, err := store.PageReadJob(ctx, h.pool, *rec.JobID)
		if err == nil {
			j.State, j.Attempt, j.MaxAttempts, j.Kind, j.AttemptedAt = job.State, job.Attempt, job.MaxAttempts, job.Kind, job.AttemptedAt
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			j.State = "gone (cleaned up by River)"
		case err != nil:
			return nil, fmt.Errorf("outboxui: job of %q: %w", key, err)
		}
		d.Job = j
		if h.opts.RiverUI != "" {
			d.JobURL = fmt.Sprintf("%s/jobs/%d", h.opts.RiverUI, *rec.JobID)
		}
	}
	events, err := store.PageReadEvents(ctx, h.pool, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("outboxui: events of %q: %w", key, err)
	}
	d.Events = make([]event, len(events))
	for i, e := range events {
		d.Events[i] = event(e)
		d.Events[i].Raw = indent(json.RawMessage(d.Events[i].Raw))
	}
	return d, nil
}

// summarize reads the addresses and subject of each email an intent
// sends: one for an email or a template, each of a batch's, a broadcast's
// audience.
func summarize(rec *outbox.Record) []emailSummary {
	var body map[string]json.RawMessage
	if json.Unmarshal(rec.Payload, &body) != nil {
		return nil
	}
	switch rec.Kind {
	case outbox.KindBatch:
		var emails []map[string]json.RawMessage
		_ = json.Unmarshal(body["emails"], &emails)
		out := make([]emailSummary, 0, len(emails))
		for _, e := range emails {
			out = append(out, summary(e))
		}
		return out
	case outbox.KindTemplate:
		s := summary(body)
		s.Extra = "template " + rec.TemplateID
		return []emailSummary{s}
	case outbox.KindBroadcast:
		s := summary(body)
		for _, f := range []string{"audienceId", "audience", "segmentId", "name"} {
			if v := text(body[f]); v != "" {
				s.Extra += f + " " + v + " "
			}
		}
		return []emailSummary{s}
	default:
		return []emailSummary{summary(body)}
	}
}

func summary(e map[string]json.RawMessage) emailSummary {
	return emailSummary{From: text(e["from"]), To: text(e["to"]), Cc: text(e["cc"]), Bcc: text(e["bcc"]),
		ReplyTo: text(e["replyTo"]), Subject: text(e["subject"])}
}

// text shows a JSON string or a list of strings as plain text.
func text(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return strings.Join(list, ", ")
	}
	return string(raw)
}

func indent(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		return string(raw)
	}
	return buf.String()
}
