package client

import (
	"encoding/json"
	"time"
)

// EmailParams is the body of emails.send (and of each email in
// emails.send_batch). Fields carry the API's camelCase names on the wire.
//
// It round-trips through JSON without loss: fields it does not model are kept
// in Extra and written back untouched, so params stored as JSON (by an outbox)
// and decoded later send the same body. Encoding is deterministic: modelled
// fields in a fixed order, then Extra's keys sorted.
type EmailParams struct {
	// From is the sender, "Name <addr@example.com>" or a bare address.
	From string
	// To, Cc and Bcc accept a single string or a list when decoded, and are
	// always sent as arrays.
	To, Cc, Bcc Recipients
	// ReplyTo is the reply-to address.
	ReplyTo string
	// Subject is the subject line.
	Subject string
	// HTML and Text are the bodies; give either or both.
	HTML string
	Text string
	// ScheduledAt, when set, delays delivery; it is sent in UTC with
	// milliseconds (2006-01-02T15:04:05.000Z).
	ScheduledAt *time.Time
	// Attachments are files inline (Filename, Content) or uploaded earlier
	// (FileID).
	Attachments []Attachment
	// Headers are extra message headers. Sent as an object; a non-nil empty
	// map is sent as {}.
	Headers map[string]string
	// Tags label the message for filtering and webhooks. Sent as an object.
	Tags map[string]string
	// DraftID sends an existing draft.
	DraftID string
	// Extra holds fields this type does not model, by wire name, as raw JSON.
	// Decoding fills it; encoding writes it back. A key that names a modelled
	// field is an encoding error.
	Extra map[string]json.RawMessage
}

func (p *EmailParams) decodeTable() map[string]any {
	return map[string]any{
		"from": &p.From, "to": &p.To, "cc": &p.Cc, "bcc": &p.Bcc, "replyTo": &p.ReplyTo,
		"subject": &p.Subject, "html": &p.HTML, "text": &p.Text, "scheduledAt": &p.ScheduledAt,
		"attachments": &p.Attachments, "headers": &p.Headers, "tags": &p.Tags, "draftId": &p.DraftID,
	}
}

var emailParamsFields = knownNames((&EmailParams{}).decodeTable())

// MarshalJSON writes the API's body: camelCase names, empty fields left out,
// recipients as arrays, ScheduledAt in UTC with milliseconds, then Extra.
func (p EmailParams) MarshalJSON() ([]byte, error) {
	w := newObjectWriter()
	w.str("from", p.From)
	w.recipients("to", p.To)
	w.recipients("cc", p.Cc)
	w.recipients("bcc", p.Bcc)
	w.str("replyTo", p.ReplyTo)
	w.str("subject", p.Subject)
	w.str("html", p.HTML)
	w.str("text", p.Text)
	w.instant("scheduledAt", p.ScheduledAt)
	if len(p.Attachments) > 0 {
		w.field("attachments", p.Attachments)
	}
	objectField(w, "headers", p.Headers)
	objectField(w, "tags", p.Tags)
	w.str("draftId", p.DraftID)
	w.extra(p.Extra, emailParamsFields)
	return w.bytes()
}

// UnmarshalJSON reads an API body; unknown fields go to Extra.
func (p *EmailParams) UnmarshalJSON(data []byte) error {
	*p = EmailParams{}
	extra, err := decodeObject("EmailParams", data, p.decodeTable())
	p.Extra = extra
	return err
}

// TemplateSendParams is the body of templates.send: an email whose content
// comes from the template, filled in with Props and Slots.
type TemplateSendParams struct {
	// From overrides the template's sender.
	From string
	// To, Cc and Bcc are always sent as arrays.
	To, Cc, Bcc Recipients
	// ReplyTo is the reply-to address.
	ReplyTo string
	// Subject overrides the template's subject.
	Subject string
	// ScheduledAt, when set, delays delivery (sent in UTC with milliseconds).
	ScheduledAt *time.Time
	// Props are the template's variables. Sent as an object. Decoded numbers
	// are json.Number, so they are written back exactly as they came.
	Props map[string]any
	// Slots fill the template's named slots. Sent as an object.
	Slots map[string]any
	// Attachments are files inline or uploaded earlier.
	Attachments []Attachment
	// Headers are extra message headers. Sent as an object.
	Headers map[string]string
	// Tags label the message. Sent as an object.
	Tags map[string]string
	// Extra holds fields this type does not model, written back untouched.
	Extra map[string]json.RawMessage
}

func (p *TemplateSendParams) decodeTable() map[string]any {
	return map[string]any{
		"from": &p.From, "to": &p.To, "cc": &p.Cc, "bcc": &p.Bcc, "replyTo": &p.ReplyTo,
		"subject": &p.Subject, "scheduledAt": &p.ScheduledAt, "props": &p.Props, "slots": &p.Slots,
		"attachments": &p.Attachments, "headers": &p.Headers, "tags": &p.Tags,
	}
}

var templateSendParamsFields = knownNames((&TemplateSendParams{}).decodeTable())

// MarshalJSON writes the API's body, Extra last with keys sorted.
func (p TemplateSendParams) MarshalJSON() ([]byte, error) {
	w := newObjectWriter()
	w.str("from", p.From)
	w.recipients("to", p.To)
	w.recipients("cc", p.Cc)
	w.recipients("bcc", p.Bcc)
	w.str("replyTo", p.ReplyTo)
	w.str("subject", p.Subject)
	w.instant("scheduledAt", p.ScheduledAt)
	objectField(w, "props", p.Props)
	objectField(w, "slots", p.Slots)
	if len(p.Attachments) > 0 {
		w.field("attachments", p.Attachments)
	}
	objectField(w, "headers", p.Headers)
	objectField(w, "tags", p.Tags)
	w.extra(p.Extra, templateSendParamsFields)
	return w.bytes()
}

// UnmarshalJSON reads an API body; unknown fields go to Extra.
func (p *TemplateSendParams) UnmarshalJSON(data []byte) error {
	*p = TemplateSendParams{}
	extra, err := decodeObject("TemplateSendParams", data, p.decodeTable())
	p.Extra = extra
	return err
}

// BroadcastParams is the body of broadcasts.send, which creates and sends
// (or schedules) a broadcast to one or more audiences.
type BroadcastParams struct {
	// AudienceID names one audience; AudienceIDs several.
	AudienceID  string
	AudienceIDs []string
	// From is the sender.
	From string
	// ReplyTo is the reply-to address.
	ReplyTo string
	// Subject is the subject line.
	Subject string
	// HTML and Text are the bodies.
	HTML string
	Text string
	// ScheduledAt, when set, delays the broadcast (UTC, milliseconds).
	ScheduledAt *time.Time
	// Extra holds fields this type does not model, written back untouched.
	Extra map[string]json.RawMessage
}

func (p *BroadcastParams) decodeTable() map[string]any {
	return map[string]any{
		"audienceId": &p.AudienceID, "audienceIds": &p.AudienceIDs, "from": &p.From,
		"replyTo": &p.ReplyTo, "subject": &p.Subject, "html": &p.HTML, "text": &p.Text,
		"scheduledAt": &p.ScheduledAt,
	}
}

var broadcastParamsFields = knownNames((&BroadcastParams{}).decodeTable())

// MarshalJSON writes the API's body, Extra last with keys sorted.
func (p BroadcastParams) MarshalJSON() ([]byte, error) {
	w := newObjectWriter()
	w.str("audienceId", p.AudienceID)
	if p.AudienceIDs != nil {
		w.field("audienceIds", p.AudienceIDs)
	}
	w.str("from", p.From)
	w.str("replyTo", p.ReplyTo)
	w.str("subject", p.Subject)
	w.str("html", p.HTML)
	w.str("text", p.Text)
	w.instant("scheduledAt", p.ScheduledAt)
	w.extra(p.Extra, broadcastParamsFields)
	return w.bytes()
}

// UnmarshalJSON reads an API body; unknown fields go to Extra.
func (p *BroadcastParams) UnmarshalJSON(data []byte) error {
	*p = BroadcastParams{}
	extra, err := decodeObject("BroadcastParams", data, p.decodeTable())
	p.Extra = extra
	return err
}

// Attachment is one file of an email: either uploaded earlier (FileID) or
// inline (Filename and Content, with an optional ContentType).
type Attachment struct {
	// FileID refers to a file uploaded with files.upload.
	FileID string
	// Filename is the name the recipient sees.
	Filename string
	// Content is the file's bytes; sent as standard base64. Decoding also
	// accepts URL-safe and unpadded base64 with whitespace.
	Content []byte
	// ContentType is the MIME type; the API guesses when empty.
	ContentType string
	// Extra holds fields this type does not model, written back untouched.
	Extra map[string]json.RawMessage
}

func (a *Attachment) decodeTable() map[string]any {
	return map[string]any{"fileId": &a.FileID, "filename": &a.Filename, "content": &a.Content, "contentType": &a.ContentType}
}

var attachmentFields = knownNames((&Attachment{}).decodeTable())

// MarshalJSON writes the set fields, then Extra.
func (a Attachment) MarshalJSON() ([]byte, error) {
	w := newObjectWriter()
	w.str("fileId", a.FileID)
	w.str("filename", a.Filename)
	if a.Content != nil {
		w.field("content", a.Content) // encoding/json writes []byte as standard base64
	}
	w.str("contentType", a.ContentType)
	w.extra(a.Extra, attachmentFields)
	return w.bytes()
}

// UnmarshalJSON reads an attachment object; unknown fields go to Extra.
func (a *Attachment) UnmarshalJSON(data []byte) error {
	*a = Attachment{}
	extra, err := decodeObject("Attachment", data, a.decodeTable())
	a.Extra = extra
	return err
}
