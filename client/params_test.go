package client

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// roundTrip decodes in into a fresh T, encodes it, and checks that encoding
// is stable: decoding the output and encoding again gives the same bytes.
func roundTrip[T any](t *testing.T, in string) string {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(in), &v); err != nil {
		t.Fatalf("Unmarshal(%s): %v", in, err)
	}
	out, err := json.Marshal(&v)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	var again T
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatalf("Unmarshal(own output %s): %v", out, err)
	}
	out2, err := json.Marshal(&again)
	if err != nil || !bytes.Equal(out, out2) {
		t.Fatalf("encoding is not stable:\n%s\n%s (%v)", out, out2, err)
	}
	return string(out)
}

// Rule 7 and the outbox: params survive JSON without loss, in the API's
// shape, byte-for-byte stable.
func TestEmailParamsRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"single recipient becomes an array",
			`{"from":"a@x.io","to":"b@x.io","subject":"Hi","text":"Hello"}`,
			`{"from":"a@x.io","to":["b@x.io"],"subject":"Hi","text":"Hello"}`},
		{"camelCase and fixed order",
			`{"draftId":"dr_1","replyTo":"r@x.io","bcc":["c@x.io"],"cc":"d@x.io","html":"<p>x</p>","to":["b@x.io","e@x.io"],"from":"a@x.io"}`,
			`{"from":"a@x.io","to":["b@x.io","e@x.io"],"cc":["d@x.io"],"bcc":["c@x.io"],"replyTo":"r@x.io","html":"\u003cp\u003ex\u003c/p\u003e","draftId":"dr_1"}`},
		{"scheduledAt in UTC with milliseconds",
			`{"to":["b@x.io"],"scheduledAt":"2030-06-01T14:30:00.123456+02:00"}`,
			`{"to":["b@x.io"],"scheduledAt":"2030-06-01T12:30:00.123Z"}`},
		{"unknown fields kept untouched, sorted",
			`{"to":["b@x.io"],"tracking":{"opens":true,"clicks":false},"zeta":12345678901234567890,"alpha":[1,"two",null],"template":{"id":"t1","props":{"n":1.50}}}`,
			`{"to":["b@x.io"],"alpha":[1,"two",null],"template":{"id":"t1","props":{"n":1.50}},"tracking":{"opens":true,"clicks":false},"zeta":12345678901234567890}`},
		{"names match exactly: Subject is not subject",
			`{"subject":"s","Subject":"S"}`,
			`{"subject":"s","Subject":"S"}`},
		{"objects stay objects, empty ones too",
			`{"headers":{},"tags":{"kind":"invoice"}}`,
			`{"headers":{},"tags":{"kind":"invoice"}}`},
		{"attachments: inline, by id, extra keys kept",
			`{"attachments":[{"filename":"a.txt","content":"aGVsbG8=","contentType":"text/plain"},{"fileId":"file_1"},{"filename":"b.bin","content":"aGVs bG8","inline":true}]}`,
			`{"attachments":[{"filename":"a.txt","content":"aGVsbG8=","contentType":"text/plain"},{"fileId":"file_1"},{"filename":"b.bin","content":"aGVsbG8=","inline":true}]}`},
		{"null is absent",
			`{"to":null,"cc":null,"scheduledAt":null,"attachments":null}`,
			`{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := roundTrip[EmailParams](t, tt.in); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestTemplateAndBroadcastParamsRoundTrip(t *testing.T) {
	t.Parallel()
	got := roundTrip[TemplateSendParams](t, `{"to":"b@x.io","props":{"name":"Ada","total":12345678901234567890,"items":[{"q":2}]},"slots":{},"locale":"de","scheduledAt":"2030-01-01T00:00:00Z"}`)
	want := `{"to":["b@x.io"],"scheduledAt":"2030-01-01T00:00:00.000Z","props":{"items":[{"q":2}],"name":"Ada","total":12345678901234567890},"slots":{},"locale":"de"}`
	if got != want {
		t.Errorf("template:\ngot  %s\nwant %s", got, want)
	}
	got = roundTrip[BroadcastParams](t, `{"audienceIds":["aud_1","aud_2"],"from":"a@x.io","subject":"News","html":"<b>hi</b>","templateId":"tpl_1","name":"March"}`)
	want = `{"audienceIds":["aud_1","aud_2"],"from":"a@x.io","subject":"News","html":"\u003cb\u003ehi\u003c/b\u003e","name":"March","templateId":"tpl_1"}`
	if got != want {
		t.Errorf("broadcast:\ngot  %s\nwant %s", got, want)
	}
}

// The worker decodes a batch payload {"emails":[...]} into []*EmailParams.
func TestBatchPayloadRoundTrip(t *testing.T) {
	t.Parallel()
	in := `{"emails":[{"to":"a@x.io","custom":{"k":1}},{"to":["b@x.io"],"subject":"2"}]}`
	var payload struct {
		Emails []*EmailParams `json:"emails"`
	}
	if err := json.Unmarshal([]byte(in), &payload); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"emails":[{"to":["a@x.io"],"custom":{"k":1}},{"to":["b@x.io"],"subject":"2"}]}`; string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
}

func TestParamsDecodeErrors(t *testing.T) {
	t.Parallel()
	bad := []string{
		`[]`, `"x"`, `{"to":5}`, `{"scheduledAt":"tomorrow"}`, `{"scheduledAt":1700000000}`,
		`{"headers":[]}`, `{"attachments":[{"content":"!!notbase64!!"}]}`, `{`,
	}
	for _, in := range bad {
		var p EmailParams
		if err := json.Unmarshal([]byte(in), &p); err == nil {
			t.Errorf("Unmarshal(%s) succeeded, want an error", in)
		}
	}
}

func TestParamsEncodeErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]EmailParams{
		"Extra names a modelled field": {Subject: "a", Extra: map[string]json.RawMessage{"subject": json.RawMessage(`"b"`)}},
		"Extra not JSON":               {Extra: map[string]json.RawMessage{"x": json.RawMessage(`{nope`)}},
	}
	for name, p := range tests {
		if _, err := json.Marshal(p); err == nil {
			t.Errorf("%s: Marshal succeeded, want an error", name)
		}
	}
}

// Rule 7: what crosses the wire is the API's shape.
func TestBodiesOnTheWire(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 6, 1, 14, 30, 0, 123456789, time.FixedZone("CEST", 2*3600))
	tests := []struct {
		name       string
		run        func(context.Context, *Client) error
		wantMethod string
		wantURI    string
		wantBody   string
	}{
		{"emails.send", func(ctx context.Context, c *Client) error {
			_, err := c.Emails.Send(ctx, &EmailParams{From: "a@x.io", To: Recipients{"b@x.io"}, Subject: "Hi", Text: "Hello", ScheduledAt: &at})
			return err
		}, "POST", "/emails", `{"from":"a@x.io","to":["b@x.io"],"subject":"Hi","text":"Hello","scheduledAt":"2030-06-01T12:30:00.123Z"}`},
		{"emails.send_batch", func(ctx context.Context, c *Client) error {
			_, err := c.Emails.SendBatch(ctx, []*EmailParams{{To: Recipients{"a@x.io"}}, {To: Recipients{"b@x.io"}}})
			return err
		}, "POST", "/emails/batch", `{"emails":[{"to":["a@x.io"]},{"to":["b@x.io"]}]}`},
		{"templates.send", func(ctx context.Context, c *Client) error {
			_, err := c.Templates.Send(ctx, "welcome email", &TemplateSendParams{To: Recipients{"b@x.io"}, Props: map[string]any{"name": "Ada"}})
			return err
		}, "POST", "/templates/welcome%20email/send", `{"to":["b@x.io"],"props":{"name":"Ada"}}`},
		{"broadcasts.send", func(ctx context.Context, c *Client) error {
			_, err := c.Broadcasts.Send(ctx, &BroadcastParams{AudienceID: "aud_1", Subject: "News", ScheduledAt: &at})
			return err
		}, "POST", "/broadcasts", `{"audienceId":"aud_1","subject":"News","scheduledAt":"2030-06-01T12:30:00.123Z"}`},
		{"emails.reschedule", func(ctx context.Context, c *Client) error {
			_, err := c.Emails.Reschedule(ctx, "em/1", at)
			return err
		}, "PATCH", "/emails/em%2F1", `{"scheduledAt":"2030-06-01T12:30:00.123Z"}`},
		{"emails.cancel", func(ctx context.Context, c *Client) error { _, err := c.Emails.Cancel(ctx, "em_1"); return err },
			"POST", "/emails/em_1/cancel", ``},
		{"broadcasts.cancel", func(ctx context.Context, c *Client) error { _, err := c.Broadcasts.Cancel(ctx, "br_1"); return err },
			"POST", "/broadcasts/br_1/cancel", ``},
		{"emails.get", func(ctx context.Context, c *Client) error { _, err := c.Emails.Get(ctx, "em!*'()"); return err },
			"GET", "/emails/em!*'()", ``},
		{"broadcasts.get", func(ctx context.Context, c *Client) error { _, err := c.Broadcasts.Get(ctx, "br_1"); return err },
			"GET", "/broadcasts/br_1", ``},
		{"emails.list", func(ctx context.Context, c *Client) error {
			from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			_, err := c.Emails.List(ctx, &EmailListParams{Status: []string{"queued", "sent"}, From: "a b@x.io", ScheduledFrom: &from, Limit: 10, Cursor: "c1"})
			return err
		}, "GET", "/emails?cursor=c1&from=a+b%40x.io&limit=10&scheduledFrom=2030-01-01T00%3A00%3A00.000Z&status=queued%2Csent", ``},
		{"raw", func(ctx context.Context, c *Client) error {
			return c.Do(ctx, "patch", "/contacts/ct_1?expand=audiences", map[string]string{"firstName": "Ada"}, nil, ForCall("contacts.update"))
		}, "PATCH", "/contacts/ct_1?expand=audiences", `{"firstName":"Ada"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, okEmail)
			c, _ := newTestClient(t, api.URL)
			if err := tt.run(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			r := api.requests()[0]
			if r.Method != tt.wantMethod || r.RequestURI != tt.wantURI || string(r.Body) != tt.wantBody {
				t.Errorf("got  %s %s %s\nwant %s %s %s", r.Method, r.RequestURI, r.Body, tt.wantMethod, tt.wantURI, tt.wantBody)
			}
			if cl := r.Header.Get("Content-Length"); tt.wantBody == "" && tt.wantMethod == "POST" && cl != "0" {
				t.Errorf("body-less POST Content-Length = %q, want 0", cl)
			}
		})
	}
}

func TestInvalidIDsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, okEmail)
	c, _ := newTestClient(t, api.URL)
	ctx := context.Background()
	for _, id := range []string{"", ".", ".."} {
		_, e1 := c.Emails.Get(ctx, id)
		_, e2 := c.Emails.Cancel(ctx, id)
		_, e3 := c.Emails.Reschedule(ctx, id, time.Now())
		_, e4 := c.Broadcasts.Get(ctx, id)
		_, e5 := c.Broadcasts.Cancel(ctx, id)
		_, e6 := c.Templates.Send(ctx, id, &TemplateSendParams{})
		for i, err := range []error{e1, e2, e3, e4, e5, e6} {
			if err == nil || !strings.Contains(err.Error(), "id is empty or only dots") {
				t.Errorf("id %q call %d: err = %v", id, i, err)
			}
		}
	}
	_, e1 := c.Emails.Send(ctx, nil)
	_, e2 := c.Emails.SendBatch(ctx, nil)
	_, e3 := c.Emails.SendBatch(ctx, []*EmailParams{nil})
	_, e4 := c.Emails.Reschedule(ctx, "em_1", time.Time{})
	_, e5 := c.Templates.Send(ctx, "t", nil)
	_, e6 := c.Broadcasts.Send(ctx, nil)
	for i, err := range []error{e1, e2, e3, e4, e5, e6} {
		if err == nil {
			t.Errorf("call %d: want an error", i)
		}
	}
	if api.count() != 0 {
		t.Errorf("%d requests sent, want 0", api.count())
	}
}
