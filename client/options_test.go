package client

import (
	"net/http"
	"testing"
	"time"
)

func TestOptions(t *testing.T) {
	t.Parallel()
	c, err := New(WithAPIKey(testAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.maxRetries != 2 || c.cfg.timeout != 30*time.Second || c.cfg.userAgent != "sendonce-go/"+Version {
		t.Errorf("defaults: retries %d timeout %v ua %q", c.cfg.maxRetries, c.cfg.timeout, c.cfg.userAgent)
	}
	bad := map[string]Option{
		"negative timeout": WithTimeout(-time.Second),
		"nil http client":  WithHTTPClient(nil),
		"nil logger":       WithLogger(nil),
		"nil sleep":        WithSleep(nil),
		"nil now":          WithNow(nil),
		"CRLF user agent":  WithUserAgent("x\r\nEvil: 1"),
	}
	for name, opt := range bad {
		if _, err := New(WithAPIKey(testAPIKey), opt); err == nil {
			t.Errorf("%s: New succeeded, want an error", name)
		}
	}
	// The caller's *http.Client is copied, not modified.
	hc := &http.Client{}
	if _, err := New(WithAPIKey(testAPIKey), WithHTTPClient(hc)); err != nil || hc.CheckRedirect != nil {
		t.Errorf("caller's http.Client was modified (err %v)", err)
	}
}
