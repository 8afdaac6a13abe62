package client

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var generatedKeyPattern = regexp.MustCompile(`^oe-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Rule 1: every send carries an Idempotency-Key, generated once per call and
// reused by each retry; two calls get two keys; a caller's key is used as is.
func TestSendsCarryIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, sc := range sendCalls {
		t.Run(sc.name+"/generated", func(t *testing.T) {
			t.Parallel()
			// Two failures then success: three attempts for the first call,
			// one for the second.
			api := newFakeAPI(t, unavailable, unavailable, okEmail)
			c, _ := newTestClient(t, api.URL)
			if err := sc.run(context.Background(), c); err != nil {
				t.Fatalf("first call: %v", err)
			}
			if err := sc.run(context.Background(), c); err != nil {
				t.Fatalf("second call: %v", err)
			}
			reqs := api.requests()
			if len(reqs) != 4 {
				t.Fatalf("attempts = %d, want 4 (3 for the first call, 1 for the second)", len(reqs))
			}
			first := reqs[0].Header.Get("Idempotency-Key")
			if !generatedKeyPattern.MatchString(first) {
				t.Fatalf("generated key %q is not oe-<uuid v4>", first)
			}
			for i := 1; i < 3; i++ {
				if got := reqs[i].Header.Get("Idempotency-Key"); got != first {
					t.Errorf("retry %d key = %q, want the call's key %q", i, got, first)
				}
			}
			second := reqs[3].Header.Get("Idempotency-Key")
			if !generatedKeyPattern.MatchString(second) || second == first {
				t.Errorf("second call key = %q, want a new oe- key (first was %q)", second, first)
			}
		})
		t.Run(sc.name+"/caller", func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, unavailable, okEmail)
			c, _ := newTestClient(t, api.URL)
			const key = "invoice:inv_4192"
			if err := sc.run(context.Background(), c, WithIdempotencyKey(key)); err != nil {
				t.Fatal(err)
			}
			reqs := api.requests()
			if len(reqs) != 2 {
				t.Fatalf("attempts = %d, want 2", len(reqs))
			}
			for i, r := range reqs {
				if got := r.Header.Get("Idempotency-Key"); got != key {
					t.Errorf("attempt %d key = %q, want %q", i+1, got, key)
				}
			}
		})
	}
}

// Only the four sends carry a key; the retried state setters do not, and raw
// requests do only when asked.
func TestOnlySendsCarryIdempotencyKey(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		run     func(context.Context, *Client) error
		wantKey string // "" = header absent
	}{
		{"emails.get", func(ctx context.Context, c *Client) error { _, err := c.Emails.Get(ctx, "em_1"); return err }, ""},
		{"emails.list", func(ctx context.Context, c *Client) error { _, err := c.Emails.List(ctx, nil); return err }, ""},
		{"emails.cancel", func(ctx context.Context, c *Client) error { _, err := c.Emails.Cancel(ctx, "em_1"); return err }, ""},
		{"emails.reschedule", func(ctx context.Context, c *Client) error { _, err := c.Emails.Reschedule(ctx, "em_1", at); return err }, ""},
		{"broadcasts.get", func(ctx context.Context, c *Client) error { _, err := c.Broadcasts.Get(ctx, "br_1"); return err }, ""},
		{"broadcasts.cancel", func(ctx context.Context, c *Client) error { _, err := c.Broadcasts.Cancel(ctx, "br_1"); return err }, ""},
		{"raw POST", func(ctx context.Context, c *Client) error {
			return c.Do(ctx, "POST", "/things", map[string]int{"a": 1}, nil)
		}, ""},
		{"raw POST with key", func(ctx context.Context, c *Client) error {
			return c.Do(ctx, "POST", "/things", map[string]int{"a": 1}, nil, WithIdempotencyKey("thing:1"))
		}, "thing:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := requestSent(t, tt.run).Header
			if got, present := h.Get("Idempotency-Key"), len(h.Values("Idempotency-Key")) > 0; got != tt.wantKey || (tt.wantKey == "" && present) {
				t.Errorf("Idempotency-Key = %q (present %v), want %q", got, present, tt.wantKey)
			}
		})
	}
}

// Rule 2: a caller key outside 1–255 of [A-Za-z0-9_.:-] is refused before
// anything is sent, with code invalid_idempotency_key.
func TestInvalidCallerKeyRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	badKeys := map[string]string{
		"empty":        "",
		"too long":     strings.Repeat("k", 256),
		"space":        "invoice 4192",
		"slash":        "invoice/4192",
		"non-ascii":    "facture:é",
		"newline":      "a\nb",
		"header trick": "a\r\nX-Evil: 1",
	}
	calls := append([]sendCall(nil), sendCalls...)
	calls = append(calls, sendCall{"raw", func(ctx context.Context, c *Client, opts ...RequestOption) error {
		return c.Do(ctx, "POST", "/things", map[string]int{}, nil, opts...)
	}})
	for name, key := range badKeys {
		for _, sc := range calls {
			t.Run(name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				api := newFakeAPI(t, okEmail)
				c, _ := newTestClient(t, api.URL)
				err := sc.run(context.Background(), c, WithIdempotencyKey(key))
				if api.count() != 0 {
					t.Fatalf("%d requests sent; a bad key must be refused before sending", api.count())
				}
				var ke *IdempotencyKeyError
				if !errors.As(err, &ke) || ke.Code != CodeInvalidIdempotencyKey {
					t.Fatalf("err = %v, want *IdempotencyKeyError with code %s", err, CodeInvalidIdempotencyKey)
				}
				if !IsInvalidIdempotencyKey(err) || !IsPermanent(err) {
					t.Errorf("IsInvalidIdempotencyKey=%v IsPermanent=%v, want both true", IsInvalidIdempotencyKey(err), IsPermanent(err))
				}
			})
		}
	}
}

func TestValidateIdempotencyKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		want bool // valid
	}{
		{"a", true},
		{"invoice:inv_4192", true},
		{"A-Z.a_z:0-9", true},
		{"oe-1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed", true},
		{strings.Repeat("x", 255), true},
		{strings.Repeat("x", 256), false},
		{"", false},
		{" ", false},
		{"a b", false},
		{"a/b", false},
		{"a+b", false},
		{"a=b", false},
		{"ключ", false},
		{"a\x00", false},
		{"tab\t", false},
	}
	for _, tt := range tests {
		err := ValidateIdempotencyKey(tt.key)
		if (err == nil) != tt.want {
			t.Errorf("ValidateIdempotencyKey(%q) = %v, want valid=%v", tt.key, err, tt.want)
		}
		if err != nil {
			if !IsInvalidIdempotencyKey(err) {
				t.Errorf("IsInvalidIdempotencyKey(%v) = false", err)
			}
			if len(tt.key) > 3 && strings.Contains(err.Error(), tt.key) {
				t.Errorf("error %q repeats the key", err)
			}
		}
	}
}

// The API's own 400 invalid_idempotency_key is recognised too.
func TestIsInvalidIdempotencyKeyFromAPI(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, respond(http.StatusBadRequest, `{"error":{"type":"invalid_request_error","code":"invalid_idempotency_key","message":"bad key"}}`))
	c, _ := newTestClient(t, api.URL)
	_, err := c.Emails.Send(context.Background(), sampleEmail())
	if !IsInvalidIdempotencyKey(err) || !IsPermanent(err) {
		t.Fatalf("err = %v; want IsInvalidIdempotencyKey and IsPermanent", err)
	}
}

func FuzzValidateIdempotencyKey(f *testing.F) {
	for _, s := range []string{"", "a", "invoice:inv_4192", "a b", strings.Repeat("z", 255), strings.Repeat("z", 256), "é", "a\r\n", "..", "-_.:"} {
		f.Add(s)
	}
	valid := regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,255}$`)
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateIdempotencyKey(key)
		if want := valid.MatchString(key); (err == nil) != want {
			t.Fatalf("ValidateIdempotencyKey(%q) = %v, want valid=%v", key, err, want)
		}
		if err != nil {
			var ke *IdempotencyKeyError
			if !errors.As(err, &ke) || ke.Code != CodeInvalidIdempotencyKey {
				t.Fatalf("error %T %v lacks code %s", err, err, CodeInvalidIdempotencyKey)
			}
		}
	})
}
