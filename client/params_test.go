package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A body held as JSON (an outbox's stored payload) goes out as it is but for
// the contract's wire rules, through each of the four sends, and the same
// bytes go out on every attempt.
func TestSendJSONWireRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"a single recipient becomes an array",
			`{"from":"a@x.io","to":"b@x.io","cc":"c@x.io","bcc":["d@x.io"],"text":"Hello"}`,
			`{"bcc":["d@x.io"],"cc":["c@x.io"],"from":"a@x.io","text":"Hello","to":["b@x.io"]}`},
		{"whitespace around values",
			`{ "to" : "b@x.io" , "scheduledAt" : "2030-01-01T00:00:00Z" }`,
			`{"scheduledAt":"2030-01-01T00:00:00.000Z","to":["b@x.io"]}`},
		{"scheduledAt in UTC with milliseconds",
			`{"to":["b@x.io"],"scheduledAt":"2030-06-01T14:30:00.123456+02:00"}`,
			`{"scheduledAt":"2030-06-01T12:30:00.123Z","to":["b@x.io"]}`},
		{"a scheduledAt that is not RFC 3339 is left to the API",
			`{"scheduledAt":"next week"}`,
			`{"scheduledAt":"next week"}`},
		{"everything else untouched: names, numbers, objects, attachments",
			`{"to":["b@x.io"],"Subject":"S","subject":"s","tracking":{"opens":true},"zeta":12345678901234567890,"props":{"n":1.50,"id":9007199254740993},"headers":{},"attachments":[{"filename":"b.bin","content":"aGVs bG8","inline":true}]}`,
			`{"Subject":"S","attachments":[{"filename":"b.bin","content":"aGVs bG8","inline":true}],"headers":{},"props":{"n":1.50,"id":9007199254740993},"subject":"s","to":["b@x.io"],"tracking":{"opens":true},"zeta":12345678901234567890}`},
		{"null attachments are left out, null recipients kept",
			`{"to":null,"attachments":null}`,
			`{"to":null}`},
	}
	type sendJSON func(context.Context, *Client, string, ...RequestOption) error
	sends := map[string]sendJSON{
		"emails.send": func(ctx context.Context, c *Client, body string, opts ...RequestOption) error {
			_, err := c.Emails.SendJSON(ctx, []byte(body), opts...)
			return err
		},
		"templates.send": func(ctx context.Context, c *Client, body string, opts ...RequestOption) error {
			_, err := c.Templates.SendJSON(ctx, "welcome", []byte(body), opts...)
			return err
		},
		"broadcasts.send": func(ctx context.Context, c *Client, body string, opts ...RequestOption) error {
			_, err := c.Broadcasts.SendJSON(ctx, []byte(body), opts...)
			return err
		},
		"emails.send_batch": func(ctx context.Context, c *Client, body string, opts ...RequestOption) error {
			_, err := c.Emails.SendBatchJSON(ctx, []byte(`{"emails":[`+body+`,`+body+`]}`), opts...)
			return err
		},
	}
	for _, tt := range tests {
		for name, send := range sends {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				t.Parallel()
				api := newFakeAPI(t, unavailable, okEmail)
				c, _ := newTestClient(t, api.URL)
				if err := send(context.Background(), c, tt.in, WithIdempotencyKey("k:1")); err != nil {
					t.Fatal(err)
				}
				want := tt.want
				if name == "emails.send_batch" {
					want = `{"emails":[` + want + `,` + want + `]}`
				}
				reqs := api.requests()
				if len(reqs) != 2 || string(reqs[0].Body) != want || string(reqs[1].Body) != want {
					t.Fatalf("bodies of %d attempts:\n%s\nwant twice\n%s", len(reqs), reqs[0].Body, want)
				}
				if reqs[1].Header.Get("Idempotency-Key") != "k:1" {
					t.Errorf("retry key = %q", reqs[1].Header.Get("Idempotency-Key"))
				}
			})
		}
	}
}

// A body that is not a JSON object is refused before anything is sent; in a
// batch, an "emails" that is not a list of objects is the API's to judge.
func TestSendJSONRefusesNonObjects(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, okEmail)
	c, _ := newTestClient(t, api.URL)
	ctx := context.Background()
	for _, body := range []string{``, `[]`, `"x"`, `null`, `{`, `{"to":"a@x.io"} x`} {
		_, e1 := c.Emails.SendJSON(ctx, []byte(body))
		_, e2 := c.Emails.SendBatchJSON(ctx, []byte(body))
		_, e3 := c.Templates.SendJSON(ctx, "t", []byte(body))
		_, e4 := c.Broadcasts.SendJSON(ctx, []byte(body))
		for i, err := range []error{e1, e2, e3, e4} {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("body %q, send %d: err = %v, want ErrInvalidRequest", body, i, err)
			}
		}
	}
	if api.count() != 0 {
		t.Fatalf("%d requests sent, want 0", api.count())
	}
	if _, err := c.Emails.SendBatchJSON(ctx, []byte(`{"emails":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if got := string(api.requests()[0].Body); got != `{"emails":"x"}` {
		t.Errorf("body = %s", got)
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
		}, "POST", "/emails", `{"from":"a@x.io","scheduledAt":"2030-06-01T12:30:00.123Z","subject":"Hi","text":"Hello","to":["b@x.io"]}`},
		{"emails.send: objects, attachments, empty fields left out", func(ctx context.Context, c *Client) error {
			_, err := c.Emails.Send(ctx, &EmailParams{From: "a@x.io", To: Recipients{"b@x.io"}, Cc: Recipients{}, Headers: map[string]string{},
				Attachments: []Attachment{{Filename: "a.txt", Content: []byte("hello"), ContentType: "text/plain"}, {FileID: "file_1"}}})
			return err
		}, "POST", "/emails", `{"attachments":[{"filename":"a.txt","content":"aGVsbG8=","contentType":"text/plain"},{"fileId":"file_1"}],"from":"a@x.io","headers":{},"to":["b@x.io"]}`},
		{"emails.send_batch", func(ctx context.Context, c *Client) error {
			_, err := c.Emails.SendBatch(ctx, []*EmailParams{{To: Recipients{"a@x.io"}}, {To: Recipients{"b@x.io"}}})
			return err
		}, "POST", "/emails/batch", `{"emails":[{"to":["a@x.io"]},{"to":["b@x.io"]}]}`},
		{"templates.send", func(ctx context.Context, c *Client) error {
			_, err := c.Templates.Send(ctx, "welcome email", &TemplateSendParams{To: Recipients{"b@x.io"}, Props: map[string]any{"name": "Ada"}, Headers: map[string]string{}})
			return err
		}, "POST", "/templates/welcome%20email/send", `{"headers":{},"props":{"name":"Ada"},"to":["b@x.io"]}`},
		{"broadcasts.send", func(ctx context.Context, c *Client) error {
			_, err := c.Broadcasts.Send(ctx, &BroadcastParams{AudienceID: "aud_1", Subject: "News", ScheduledAt: &at})
			return err
		}, "POST", "/broadcasts", `{"audienceId":"aud_1","scheduledAt":"2030-06-01T12:30:00.123Z","subject":"News"}`},
		{"emails.reschedule", func(ctx context.Context, c *Client) error {
			_, err := c.Emails.Reschedule(ctx, "em/1", at)
			return err
		}, "PATCH", "/emails/em%2F1", `{"scheduledAt":"2030-06-01T12:30:00.123Z"}`},
		{"emails.cancel", func(ctx context.Context, c *Client) error { _, err := c.Emails.Cancel(ctx, "em_1"); return err },
			"POST", "/emails/em_1/cancel", ``},
		{"broadcasts.cancel", func(ctx context.Context, c *Client) error { _, err := c.Broadcasts.Cancel(ctx, "br_1"); return err },
			"POST", "/broadcasts/br_1/cancel", ``},
		{"emails.get", func(ctx context.Context, c *Client) error { _, err := c.Emails.Get(ctx, "em!*'()$@"); return err },
			"GET", "/emails/em%21%2A%27%28%29$@", ``},
		{"broadcasts.get", func(ctx context.Context, c *Client) error { _, err := c.Broadcasts.Get(ctx, "br_1"); return err },
			"GET", "/broadcasts/br_1", ``},
		{"emails.list", func(ctx context.Context, c *Client) error {
			from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			_, err := c.Emails.List(ctx, &EmailListParams{Status: []string{"queued", "sent"}, From: "a b@x.io", ScheduledFrom: &from, Limit: 10, Cursor: "c1"})
			return err
		}, "GET", "/emails?cursor=c1&from=a+b%40x.io&limit=10&scheduledFrom=2030-01-01T00%3A00%3A00.000Z&status=queued%2Csent", ``},
		{"raw", func(ctx context.Context, c *Client) error {
			return c.Do(ctx, "patch", "/contacts/ct_1?expand=audiences", map[string]string{"firstName": "Ada"}, nil, Repeatable())
		}, "PATCH", "/contacts/ct_1?expand=audiences", `{"firstName":"Ada"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := requestSent(t, tt.run)
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
