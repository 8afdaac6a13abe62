package fakeapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

// --quota N/d answers as an API with a daily sending quota does: past the
// quota a 429 naming it, with Retry-After until midnight UTC; after
// midnight the count starts again.
func TestDailyQuota(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 23, 0, 0, 0, time.UTC)
	srv := fakeapi.NewTest(t, fakeapi.Config{Quota: []fakeapi.Quota{{Count: 2}}, Now: func() time.Time { return now }})
	send := func() (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL()+"/emails", nil)
		req.Header.Set("Authorization", "Bearer oe_test_quota0000000000")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, resp.Header, b.String()
	}
	for i := range 2 {
		if code, _, body := send(); code != 200 {
			t.Fatalf("request %d: %d %s", i+1, code, body)
		}
	}
	code, h, body := send()
	if code != 429 || h.Get("Retry-After") != "3600" || !strings.Contains(body, `"code":"daily_quota_exceeded"`) ||
		!strings.Contains(body, "daily sending quota of this API key (2/d)") || !strings.Contains(body, "2030-01-02T00:00:00Z") {
		t.Fatalf("past the quota: %d Retry-After %q %s", code, h.Get("Retry-After"), body)
	}
	if srv.QuotaRefused() != 1 {
		t.Fatalf("QuotaRefused %d, want 1", srv.QuotaRefused())
	}
	now = now.Add(time.Hour)
	if code, _, body := send(); code != 200 {
		t.Fatalf("after midnight: %d %s", code, body)
	}
	if q, err := fakeapi.ParseQuota("500/d,10000/mo"); err != nil || len(q) != 2 || q[1].String() != "10000/mo" {
		t.Fatalf("ParseQuota: %v %v", q, err)
	}
	for _, bad := range []string{"0/d", "10/fortnight", "x"} {
		if _, err := fakeapi.ParseQuota(bad); err == nil {
			t.Errorf("ParseQuota(%q) took it", bad)
		}
	}
}
