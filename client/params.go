package client

import "time"

// The params types are the request bodies of the four sends, encoded with
// encoding/json under the API's camelCase names; empty fields are left out.
// Before a body is sent, the client applies the contract's wire rules to it
// (see normaliseSendBody): recipients go out as arrays and ScheduledAt in UTC
// with milliseconds. A body already held as JSON (an outbox's stored
// payload) takes the same path through the SendJSON methods.

// EmailParams is the body of emails.send (and of each email in
// emails.send_batch).
type EmailParams struct {
	// From is the sender, "Name <addr@example.com>" or a bare address.
	From string `json:"from,omitempty"`
	// To, Cc and Bcc are sent as arrays; decoding also takes one string.
	To  Recipients `json:"to,omitempty"`
	Cc  Recipients `json:"cc,omitempty"`
	Bcc Recipients `json:"bcc,omitempty"`
	// ReplyTo is the reply-to address.
	ReplyTo string `json:"replyTo,omitempty"`
	// Subject is the subject line.
	Subject string `json:"subject,omitempty"`
	// HTML and Text are the bodies; give either or both.
	HTML string `json:"html,omitempty"`
	Text string `json:"text,omitempty"`
	// ScheduledAt, when set, delays delivery; it is sent in UTC with
	// milliseconds (2006-01-02T15:04:05.000Z).
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
	// Attachments are files inline (Filename, Content) or uploaded earlier
	// (FileID).
	Attachments []Attachment `json:"attachments,omitempty"`
	// Headers are extra message headers. The API wants an object, so a
	// non-nil empty map is sent as {}; a nil one is left out.
	Headers map[string]string `json:"headers,omitzero"`
	// Tags label the message for filtering and webhooks; sent like Headers.
	Tags map[string]string `json:"tags,omitzero"`
	// DraftID sends an existing draft.
	DraftID string `json:"draftId,omitempty"`
}

// TemplateSendParams is the body of templates.send: an email whose content
// comes from the template, filled in with Props and Slots. Its fields From to
// Subject repeat EmailParams' on purpose: each params type is one call's body
// in the contract, and an embedded struct would have callers spell it out in
// every literal.
type TemplateSendParams struct {
	// From overrides the template's sender.
	From string `json:"from,omitempty"`
	// To, Cc and Bcc are sent as arrays.
	To  Recipients `json:"to,omitempty"`
	Cc  Recipients `json:"cc,omitempty"`
	Bcc Recipients `json:"bcc,omitempty"`
	// ReplyTo is the reply-to address.
	ReplyTo string `json:"replyTo,omitempty"`
	// Subject overrides the template's subject.
	Subject string `json:"subject,omitempty"`
	// ScheduledAt, when set, delays delivery (sent in UTC with milliseconds).
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
	// Props are the template's variables and Slots fill its named slots.
	// Both are objects: a non-nil empty map is sent as {}.
	Props map[string]any `json:"props,omitzero"`
	Slots map[string]any `json:"slots,omitzero"`
	// Attachments are files inline or uploaded earlier.
	Attachments []Attachment `json:"attachments,omitempty"`
	// Headers and Tags are sent as objects, like EmailParams'.
	Headers map[string]string `json:"headers,omitzero"`
	Tags    map[string]string `json:"tags,omitzero"`
}

// BroadcastParams is the body of broadcasts.send, which creates and sends
// (or schedules) a broadcast to one or more audiences.
type BroadcastParams struct {
	// AudienceID names one audience; AudienceIDs several.
	AudienceID  string   `json:"audienceId,omitempty"`
	AudienceIDs []string `json:"audienceIds,omitzero"`
	// From is the sender.
	From string `json:"from,omitempty"`
	// ReplyTo is the reply-to address.
	ReplyTo string `json:"replyTo,omitempty"`
	// Subject is the subject line.
	Subject string `json:"subject,omitempty"`
	// HTML and Text are the bodies.
	HTML string `json:"html,omitempty"`
	Text string `json:"text,omitempty"`
	// ScheduledAt, when set, delays the broadcast (UTC, milliseconds).
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
}

// Attachment is one file of an email: either uploaded earlier (FileID) or
// inline (Filename and Content, with an optional ContentType).
type Attachment struct {
	// FileID refers to a file uploaded with files.upload.
	FileID string `json:"fileId,omitempty"`
	// Filename is the name the recipient sees.
	Filename string `json:"filename,omitempty"`
	// Content is the file's bytes, sent as standard base64.
	Content []byte `json:"content,omitempty"`
	// ContentType is the MIME type; the API guesses when empty.
	ContentType string `json:"contentType,omitempty"`
}
