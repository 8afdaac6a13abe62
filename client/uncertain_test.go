package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// TestUncertainRefusal: a call whose earlier attempt ended without a known
// outcome (a 5xx, a dropped connection) and whose retry the API then
// refused (a proxy's 400, a 422 after a validation change) may have been
// delivered by that earlier attempt. The refusal says nothing of it, so
// the error must say so: a caller that read the 422 as "not sent" and sent
// again under another key would deliver twice.
func TestUncertainRefusal(t *testing.T) {
	t.Parallel()
	drop := func(w http.ResponseWriter, r *http.Request) {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}
	const refusal = `{"error":{"type":"validation_error","code":"invalid","message":"no"}}`
	tests := []struct {
		name          string
		handlers      []http.HandlerFunc
		wantStatus    int
		wantUncertain bool
	}{
		{"422 alone", []http.HandlerFunc{respond(422, refusal)}, 422, false},
		{"503 then 422", []http.HandlerFunc{respond(503, ""), respond(422, refusal)}, 422, true},
		{"dropped then 400", []http.HandlerFunc{drop, respond(400, refusal)}, 400, true},
		{"429 then 422", []http.HandlerFunc{respond(429, "", "Retry-After", "1"), respond(422, refusal)}, 422, false},
		{"503 then 429", []http.HandlerFunc{respond(503, ""), respond(429, "")}, 429, true},
		{"503 three times", []http.HandlerFunc{respond(503, "")}, 503, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tt.handlers...)
			c, _ := newTestClient(t, api.URL)
			_, err := c.Emails.Send(context.Background(), sampleEmail())
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != tt.wantStatus {
				t.Fatalf("err = %v, want *APIError status %d", err, tt.wantStatus)
			}
			if apiErr.Uncertain != tt.wantUncertain {
				t.Errorf("Uncertain = %v, want %v (%v)", apiErr.Uncertain, tt.wantUncertain, err)
			}
			if got := MayHaveBeenDelivered(err); got != tt.wantUncertain {
				t.Errorf("MayHaveBeenDelivered = %v, want %v", got, tt.wantUncertain)
			}
		})
	}
}

// TestRefusedConnection: a connection refused happens before any byte of
// the request leaves, so a send whose every attempt was refused cannot have
// been delivered. A refusal after an attempt whose answer was lost (a 503
// here) proves nothing of that attempt: the request may have been taken.
func TestRefusedConnection(t *testing.T) {
	t.Parallel()
	t.Run("every attempt refused", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, respond(200, `{"id":"em_1"}`))
		url := api.URL
		api.Close() // nothing listens on the port any more
		c, _ := newTestClient(t, url)
		_, err := c.Emails.Send(context.Background(), sampleEmail())
		var netErr *NetworkError
		if !errors.As(err, &netErr) || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("err = %v, want a *NetworkError, connection refused", err)
		}
		if netErr.Uncertain || MayHaveBeenDelivered(err) {
			t.Errorf("Uncertain = %v, MayHaveBeenDelivered = %v; want false, false: no connection was made (%v)",
				netErr.Uncertain, MayHaveBeenDelivered(err), err)
		}
	})
	t.Run("503, then refused", func(t *testing.T) {
		t.Parallel()
		var api *fakeAPI
		api = newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			// The API goes away after this answer: the listener is closed
			// and this connection is not kept, so the retry is refused.
			api.Listener.Close()
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		c, _ := newTestClient(t, api.URL)
		_, err := c.Emails.Send(context.Background(), sampleEmail())
		var netErr *NetworkError
		if !errors.As(err, &netErr) || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("err = %v, want a *NetworkError, connection refused", err)
		}
		if !netErr.Uncertain || !MayHaveBeenDelivered(err) {
			t.Errorf("Uncertain = %v, MayHaveBeenDelivered = %v; want true, true: the 503's request may have been taken (%v)",
				netErr.Uncertain, MayHaveBeenDelivered(err), err)
		}
		if n := api.count(); n != 1 {
			t.Errorf("the API saw %d requests, want 1", n)
		}
	})
}
