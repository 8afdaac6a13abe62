package client

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"
)

// Rule 7: the send responses expose replayed.
func TestReplayedExposed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		run  func(context.Context, *Client) (bool, error)
		want bool
	}{
		{"email replayed", `{"id":"em_1","status":"sent","replayed":true}`, func(ctx context.Context, c *Client) (bool, error) {
			e, err := c.Emails.Send(ctx, sampleEmail())
			return e != nil && e.Replayed, err
		}, true},
		{"email fresh", `{"id":"em_1","status":"queued"}`, func(ctx context.Context, c *Client) (bool, error) {
			e, err := c.Emails.Send(ctx, sampleEmail())
			return e != nil && e.Replayed, err
		}, false},
		{"template replayed", `{"id":"em_1","status":"sent","replayed":true}`, func(ctx context.Context, c *Client) (bool, error) {
			e, err := c.Templates.Send(ctx, "t", &TemplateSendParams{To: Recipients{"a@x.io"}})
			return e != nil && e.Replayed, err
		}, true},
		{"batch replayed", `{"data":[{"id":"em_1"},{"id":"em_2"}],"sent":2,"failed":0,"replayed":true}`, func(ctx context.Context, c *Client) (bool, error) {
			b, err := c.Emails.SendBatch(ctx, []*EmailParams{sampleEmail()})
			return b != nil && b.Replayed && len(b.Data) == 2 && b.Sent == 2, err
		}, true},
		{"broadcast replayed", `{"id":"br_1","status":"scheduled","replayed":true}`, func(ctx context.Context, c *Client) (bool, error) {
			b, err := c.Broadcasts.Send(ctx, &BroadcastParams{AudienceID: "a"})
			return b != nil && b.Replayed && b.Status == BroadcastScheduled, err
		}, true},
		{"replayed not a bool", `{"id":"em_1","replayed":"yes"}`, func(ctx context.Context, c *Client) (bool, error) {
			e, err := c.Emails.Send(ctx, sampleEmail())
			return e != nil && e.Replayed, err
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, respond(200, tt.body))
			c, _ := newTestClient(t, api.URL)
			got, err := tt.run(context.Background(), c)
			if err != nil || got != tt.want {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// An accepted send is never reported as failed because an optional field had
// an unexpected shape; the body is always in Raw.
func TestEmailDecodesLeniently(t *testing.T) {
	t.Parallel()
	body := `{"id":"em_1","status":"queued","to":"a@x.io","cc":["b@x.io"],"createdAt":1700000000,"scheduledAt":"2030-01-01T00:00:00Z","subject":{"weird":true},"extra":[1]}`
	api := newFakeAPI(t, respond(200, body))
	c, _ := newTestClient(t, api.URL)
	e, err := c.Emails.Send(context.Background(), sampleEmail())
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if e.ID != "em_1" || e.Status != "queued" || !reflect.DeepEqual(e.To, []string{"a@x.io"}) || e.Subject != "" ||
		e.CreatedAt != nil || e.ScheduledAt == nil || !e.ScheduledAt.Equal(want) || string(e.Raw) != body {
		t.Errorf("got %+v", e)
	}
	// Non-object JSON and an empty body are accepted too.
	for _, b := range []string{`[1,2]`, `"ok"`, ``} {
		api := newFakeAPI(t, respond(200, b))
		c, _ := newTestClient(t, api.URL)
		if _, err := c.Emails.Send(context.Background(), sampleEmail()); err != nil {
			t.Errorf("body %q: %v", b, err)
		}
	}
}

func TestEmailListEnvelope(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body       string
		wantLen    int
		wantMore   bool
		wantCursor string
	}{
		{`{"data":[{"id":"a"},{"id":"b"}],"hasMore":true,"nextCursor":"c2"}`, 2, true, "c2"},
		{`{"data":[],"hasMore":false,"nextCursor":null}`, 0, false, ""},
		{`{"data":[{"id":"a"}],"nextCursor":"c2"}`, 1, true, "c2"}, // hasMore inferred
		{`{"data":[{"id":"a"}],"hasMore":"yes","nextCursor":""}`, 1, false, ""},
		{`{"data":{"not":"a list"}}`, 0, false, ""},
	}
	for _, tt := range tests {
		api := newFakeAPI(t, respond(200, tt.body))
		c, _ := newTestClient(t, api.URL)
		l, err := c.Emails.List(context.Background(), nil)
		if err != nil || len(l.Data) != tt.wantLen || l.HasMore != tt.wantMore || l.NextCursor != tt.wantCursor {
			t.Errorf("%s: got %+v, %v", tt.body, l, err)
		}
	}
}

func TestEmailsAll(t *testing.T) {
	t.Parallel()
	pages := map[string]string{
		"":   `{"data":[{"id":"1"},{"id":"2"}],"hasMore":true,"nextCursor":"c2"}`,
		"c2": `{"data":[{"id":"3"}],"hasMore":true,"nextCursor":"c3"}`,
		"c3": `{"data":[{"id":"4"}],"hasMore":true,"nextCursor":"c2"}`, // repeats: stop
	}
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		respond(200, pages[r.URL.Query().Get("cursor")])(w, r)
	})
	c, _ := newTestClient(t, api.URL)
	var ids []string
	for e, err := range c.Emails.All(context.Background(), &EmailListParams{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	if !reflect.DeepEqual(ids, []string{"1", "2", "3", "4"}) || api.count() != 3 {
		t.Errorf("ids = %v after %d requests", ids, api.count())
	}
	// Breaking early stops fetching.
	api2 := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		respond(200, pages[r.URL.Query().Get("cursor")])(w, r)
	})
	c2, _ := newTestClient(t, api2.URL)
	for range c2.Emails.All(context.Background(), nil) {
		break
	}
	if api2.count() != 1 {
		t.Errorf("requests after break = %d, want 1", api2.count())
	}
	// An error is yielded once.
	api3 := newFakeAPI(t, respond(404, ""))
	c3, _ := newTestClient(t, api3.URL)
	n := 0
	for _, err := range c3.Emails.All(context.Background(), nil) {
		n++
		if !IsNotFound(err) {
			t.Errorf("err = %v", err)
		}
	}
	if n != 1 {
		t.Errorf("yielded %d times, want 1", n)
	}
}

func TestDoDecodesIntoOut(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, respond(200, `{"id":"dom_1","name":"x.io"}`))
	c, _ := newTestClient(t, api.URL)
	var out struct{ ID, Name string }
	if err := c.Do(context.Background(), "GET", "/domains/dom_1", nil, &out); err != nil || out.ID != "dom_1" || out.Name != "x.io" {
		t.Fatalf("out = %+v, err = %v", out, err)
	}
	if err := c.Do(context.Background(), "", "/x", nil, nil); err == nil {
		t.Error("empty method accepted")
	}
}

// A batch answer lists one item per requested email, in order; a refused one
// carries an error object and no id.
func TestBatchResultDecodesRefusedItems(t *testing.T) {
	t.Parallel()
	body := `{"data":[` +
		`{"id":"em_1","status":"sent","to":["a@x.io"]},` +
		`{"status":"failed","to":["bounced@x.io"],"error":{"type":"invalid_request_error","code":"recipient_rejected","message":"emails[1] was not sent.","param":"emails[1].to"}},` +
		`{"id":"em_3","status":"sent","to":["c@x.io"],"error":null},` +
		`{"status":"failed","error":{"code":7,"message":"odd shapes stay zero"}},` +
		`{"status":"failed","error":"suppressed"}` +
		`],"sent":2,"failed":3,"replayed":false}`
	api := newFakeAPI(t, respond(200, body))
	c, _ := newTestClient(t, api.URL)
	b, err := c.Emails.SendBatch(context.Background(), []*EmailParams{sampleEmail(), sampleEmail()})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Data) != 5 || b.Sent != 2 || b.Failed != 3 {
		t.Fatalf("got %+v", b)
	}
	if e := b.Data[0]; e.ID != "em_1" || e.Error != nil {
		t.Errorf("data[0] = %+v, want accepted", e)
	}
	want := &ItemError{Type: TypeInvalidRequest, Code: "recipient_rejected", Message: "emails[1] was not sent.", Param: "emails[1].to"}
	if e := b.Data[1]; e.ID != "" || e.Status != "failed" || !reflect.DeepEqual(e.To, []string{"bounced@x.io"}) || !reflect.DeepEqual(e.Error, want) {
		t.Errorf("data[1] = %+v, error %+v; want refused with %+v", e, e.Error, want)
	}
	if e := b.Data[2]; e.ID != "em_3" || e.Error != nil {
		t.Errorf("data[2] = %+v, want accepted (a null error is none)", e)
	}
	if e := b.Data[3].Error; e == nil || e.Code != "" || e.Message != "odd shapes stay zero" {
		t.Errorf("data[3].Error = %+v", e)
	}
	if e := b.Data[4].Error; e == nil || e.Message != "suppressed" {
		t.Errorf("data[4].Error = %+v, want the bare string as its message", e)
	}
	// Neither an object nor a string: not taken as refused.
	var e Email
	if err := json.Unmarshal([]byte(`{"id":"em_1","error":false}`), &e); err != nil || e.Error != nil {
		t.Errorf("error false: %+v, %v", e.Error, err)
	}
}
