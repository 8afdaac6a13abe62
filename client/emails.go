package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EmailsService is the emails resource: c.Emails.
type EmailsService struct{ c *Client }

// Email is an email as the API returns it. Fields the API may return beyond
// those modelled here are in Raw, the whole response body.
//
// In a BatchResult's Data an Email may stand for an email the API refused on
// its own while sending the rest of the batch: then Error is set, Status is
// usually "failed" and there is no ID, as no message was made.
type Email struct {
	// ID is the email's id (em_…).
	ID string `json:"id"`
	// Status is where the email is in its life (queued, scheduled, sent, …).
	Status string `json:"status"`
	// Replayed is true when the API answered a send from its idempotency
	// record instead of sending: a retry, or a second send with the same
	// key. The email is returned in its current state.
	Replayed bool `json:"replayed,omitempty"`
	// From, To, Cc, Bcc and Subject echo the message.
	From    string   `json:"from,omitempty"`
	To      []string `json:"to,omitempty"`
	Cc      []string `json:"cc,omitempty"`
	Bcc     []string `json:"bcc,omitempty"`
	Subject string   `json:"subject,omitempty"`
	// BroadcastID names the broadcast the email belongs to, if any.
	BroadcastID string `json:"broadcastId,omitempty"`
	// ScheduledAt and CreatedAt are nil when absent or not RFC 3339.
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
	CreatedAt   *time.Time `json:"createdAt,omitempty"`
	// Error is set on a batch item the API refused: that email was not sent
	// and has no ID. It is nil for an email the API accepted.
	Error *ItemError `json:"error,omitempty"`
	// Raw is the JSON this Email was decoded from.
	Raw json.RawMessage `json:"-"`
}

// ItemError is why the API refused one email of a batch while sending the
// others (the item's "error" object): the fields of an error answer, for that
// email alone. A batch holding refused emails still succeeds as a call; look
// at BatchResult.Failed and each item's Error.
type ItemError struct {
	// Type is the error type, such as invalid_request_error.
	Type string `json:"type,omitempty"`
	// Code says why, such as recipient_rejected.
	Code string `json:"code,omitempty"`
	// Message is the API's explanation.
	Message string `json:"message,omitempty"`
	// Param names the input the refusal is about, such as emails[2].to.
	Param string `json:"param,omitempty"`
}

// UnmarshalJSON decodes leniently: members of an unexpected type stay zero,
// and a bare string is taken as the message. Any other JSON value is an
// error, so an Email whose "error" is neither an object nor a string (false,
// say) is not taken as refused.
func (e *ItemError) UnmarshalJSON(data []byte) error {
	var message string
	if json.Unmarshal(data, &message) == nil {
		*e = ItemError{Message: message}
		return nil
	}
	m, _ := decodeResponse(data)
	if m == nil {
		return fmt.Errorf("client: item error %.40s is neither an object nor a string", data)
	}
	*e = ItemError{
		Type:    field[string](m, "type"),
		Code:    field[string](m, "code"),
		Message: field[string](m, "message"),
		Param:   field[string](m, "param"),
	}
	return nil
}

// UnmarshalJSON decodes leniently: fields of an unexpected type stay zero,
// and Raw keeps everything.
func (e *Email) UnmarshalJSON(data []byte) error {
	m, raw := decodeResponse(data)
	*e = Email{
		ID:          field[string](m, "id"),
		Status:      field[string](m, "status"),
		Replayed:    field[bool](m, "replayed"),
		From:        field[string](m, "from"),
		To:          field[Recipients](m, "to"),
		Cc:          field[Recipients](m, "cc"),
		Bcc:         field[Recipients](m, "bcc"),
		Subject:     field[string](m, "subject"),
		BroadcastID: field[string](m, "broadcastId"),
		ScheduledAt: field[*time.Time](m, "scheduledAt"),
		CreatedAt:   field[*time.Time](m, "createdAt"),
		Error:       field[*ItemError](m, "error"),
		Raw:         raw,
	}
	return nil
}

// BatchResult is the answer to emails.send_batch.
type BatchResult struct {
	// Data holds one Email per requested email, in request order. An item
	// with Error set was refused by the API: it was not sent and has no ID.
	// The others were accepted.
	Data []Email `json:"data"`
	// Sent and Failed count the accepted and the refused emails.
	Sent   int `json:"sent"`
	Failed int `json:"failed"`
	// Replayed is true when the whole batch was answered from the
	// idempotency record.
	Replayed bool `json:"replayed,omitempty"`
	// Raw is the whole response body.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes leniently, keeping the body in Raw.
func (b *BatchResult) UnmarshalJSON(data []byte) error {
	m, raw := decodeResponse(data)
	*b = BatchResult{Data: field[[]Email](m, "data"), Sent: field[int](m, "sent"), Failed: field[int](m, "failed"),
		Replayed: field[bool](m, "replayed"), Raw: raw}
	return nil
}

// EmailList is one page of emails.
type EmailList struct {
	// Data holds the page's emails.
	Data []Email `json:"data"`
	// HasMore says another page follows; fetch it with NextCursor.
	HasMore bool `json:"hasMore"`
	// NextCursor continues the listing; empty when there is no next page.
	NextCursor string `json:"nextCursor,omitempty"`
	// Raw is the whole response body.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the list envelope. When hasMore is not a boolean it
// is inferred from nextCursor, and an empty cursor counts as none, as the
// official SDKs do.
func (l *EmailList) UnmarshalJSON(data []byte) error {
	m, raw := decodeResponse(data)
	*l = EmailList{Data: field[[]Email](m, "data"), NextCursor: field[string](m, "nextCursor"), Raw: raw}
	l.HasMore = l.NextCursor != ""
	if hasMore := field[*bool](m, "hasMore"); hasMore != nil {
		l.HasMore = *hasMore
	}
	return nil
}

// EmailListParams filters emails.list. Zero fields are left out.
type EmailListParams struct {
	// Status keeps emails in any of these statuses.
	Status []string
	// From keeps emails from this sender.
	From string
	// BroadcastID keeps the emails of one broadcast.
	BroadcastID string
	// ScheduledFrom and ScheduledTo bound the scheduled time.
	ScheduledFrom *time.Time
	ScheduledTo   *time.Time
	// Limit is the page size; 0 leaves it to the API.
	Limit int
	// Cursor continues from a previous page's NextCursor.
	Cursor string
}

func (p *EmailListParams) query() url.Values {
	q := url.Values{}
	if p == nil {
		return q
	}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("status", strings.Join(p.Status, ","))
	set("from", p.From)
	set("broadcastId", p.BroadcastID)
	if p.ScheduledFrom != nil {
		set("scheduledFrom", formatInstant(*p.ScheduledFrom))
	}
	if p.ScheduledTo != nil {
		set("scheduledTo", formatInstant(*p.ScheduledTo))
	}
	if p.Limit > 0 {
		set("limit", strconv.Itoa(p.Limit))
	}
	set("cursor", p.Cursor)
	return q
}

// Send sends one email (POST /emails). It carries an Idempotency-Key, the
// caller's (WithIdempotencyKey) or one generated for this call, and is
// retried with that same key, so a retry replays rather than sends twice.
func (s *EmailsService) Send(ctx context.Context, params *EmailParams, opts ...RequestOption) (*Email, error) {
	body, err := encode("Emails.Send", params)
	if err != nil {
		return nil, err
	}
	return s.SendJSON(ctx, body, opts...)
}

// SendJSON is Send for a body already held as JSON, such as an outbox's
// stored payload: the same call, key and retries. The body is sent as it is
// but for the contract's wire rules (a single-string to, cc or bcc becomes an
// array; scheduledAt goes out in UTC with milliseconds). A body that is not a
// JSON object is refused with ErrInvalidRequest before anything is sent.
func (s *EmailsService) SendJSON(ctx context.Context, body json.RawMessage, opts ...RequestOption) (*Email, error) {
	return send[Email](ctx, s.c, "emails.send", "/emails", body, opts)
}

// SendBatch sends several emails in one request (POST /emails/batch, body
// {"emails":[...]}), under one Idempotency-Key for the whole batch.
func (s *EmailsService) SendBatch(ctx context.Context, emails []*EmailParams, opts ...RequestOption) (*BatchResult, error) {
	if len(emails) == 0 || slices.Contains(emails, nil) {
		return nil, fmt.Errorf("%w: Emails.SendBatch: no emails, or a nil one", ErrInvalidRequest)
	}
	body, err := encode("Emails.SendBatch", &struct {
		Emails []*EmailParams `json:"emails"`
	}{emails})
	if err != nil {
		return nil, err
	}
	return s.SendBatchJSON(ctx, body, opts...)
}

// SendBatchJSON is SendBatch for a body {"emails":[...]} already held as
// JSON; each email is normalised as in SendJSON.
func (s *EmailsService) SendBatchJSON(ctx context.Context, body json.RawMessage, opts ...RequestOption) (*BatchResult, error) {
	return send[BatchResult](ctx, s.c, "emails.send_batch", "/emails/batch", body, opts)
}

// Get reads one email (GET /emails/:id).
func (s *EmailsService) Get(ctx context.Context, id string) (*Email, error) {
	return onID[Email](ctx, s.c, "emails.get", methodGet, "/emails", id, "", nil)
}

// Cancel cancels a scheduled email (POST /emails/:id/cancel, no body). It
// sets a named state, so it is retried; it carries no idempotency key.
func (s *EmailsService) Cancel(ctx context.Context, id string) (*Email, error) {
	return onID[Email](ctx, s.c, "emails.cancel", methodPost, "/emails", id, "/cancel", nil)
}

// Reschedule moves a scheduled email to at (PATCH /emails/:id with
// {"scheduledAt": at}). The time is in the body, so a retry sets the same
// time again; it carries no idempotency key.
func (s *EmailsService) Reschedule(ctx context.Context, id string, at time.Time) (*Email, error) {
	if at.IsZero() {
		return nil, fmt.Errorf("%w: Emails.Reschedule: zero time", ErrInvalidRequest)
	}
	body := map[string]string{"scheduledAt": formatInstant(at)}
	return onID[Email](ctx, s.c, "emails.reschedule", methodPatch, "/emails", id, "", body)
}

// List reads one page of emails (GET /emails). params may be nil.
func (s *EmailsService) List(ctx context.Context, params *EmailListParams) (*EmailList, error) {
	return result[EmailList](ctx, s.c, &request{call: "emails.list", method: methodGet, path: "/emails", query: params.query()})
}

// All iterates over every email matching params, page after page from
// params.Cursor. It stops after the last page, when no next cursor is given,
// or when a cursor repeats (a server bug that would otherwise loop forever).
// An error is yielded once, and ends the iteration.
func (s *EmailsService) All(ctx context.Context, params *EmailListParams) iter.Seq2[*Email, error] {
	return func(yield func(*Email, error) bool) {
		p := EmailListParams{}
		if params != nil {
			p = *params
		}
		seen := map[string]bool{}
		for {
			page, err := s.List(ctx, &p)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range page.Data {
				if !yield(&page.Data[i], nil) {
					return
				}
			}
			if !page.HasMore || page.NextCursor == "" || seen[page.NextCursor] {
				return
			}
			seen[page.NextCursor] = true
			p.Cursor = page.NextCursor
		}
	}
}
