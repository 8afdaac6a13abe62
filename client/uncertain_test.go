package client

import (
	"context"
	"errors"
	"net/http"
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
