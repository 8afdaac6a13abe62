package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func TestParseBaseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string // "" = error
		errText string // substring of the error
	}{
		{"https://api.openemail.uk", "https://api.openemail.uk", ""},
		{"  https://api.openemail.uk//  ", "https://api.openemail.uk", ""},
		{"https://gw.example.com/openemail/", "https://gw.example.com/openemail", ""},
		{"api.example.com", "https://api.example.com", ""},
		{"localhost:2222", "http://localhost:2222", ""},
		{"127.0.0.1:8080/", "http://127.0.0.1:8080", ""},
		{"127.1:8080", "https://127.1:8080", ""}, // not a netip address: not local
		{"[::1]:8080", "http://[::1]:8080", ""},
		{"::1", "", ""}, // bare IPv6 with port-like colons cannot be a URL host
		{"http://user:pa55word@api.example.com", "", "user information"},
		{"https://user@api.example.com", "", "user information"},
		{"http://0.0.0.0:8080", "", "use 127.0.0.1:8080"},
		{"0.0.0.0:8080", "", "use 127.0.0.1:8080"},
		{"http://[::]:9000", "", "use [::1]:9000"},
		{"ftp://api.example.com", "", "scheme"},
		{"https://", "", "host"},
		{"https://api.example.com?x=1", "", "query"},
		{"https://api.example.com#frag", "", "query or fragment"},
		{"https://api.example.com:99999", "", "port"},
		{"", "", "empty"},
		{"https://api.exa mple.com", "", ""},
	}
	for _, tt := range tests {
		got, err := parseBaseURL(tt.in)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("parseBaseURL(%q) = %s, want an error", tt.in, got)
		case tt.want != "" && err != nil:
			t.Errorf("parseBaseURL(%q) error %v, want %s", tt.in, err, tt.want)
		case err != nil:
			if !errors.Is(err, ErrInvalidBaseURL) || !strings.Contains(err.Error(), tt.errText) {
				t.Errorf("parseBaseURL(%q) error %q, want ErrInvalidBaseURL mentioning %q", tt.in, err, tt.errText)
			}
			if strings.Contains(err.Error(), "pa55word") {
				t.Errorf("error %q repeats the password", err)
			}
		case got.String() != tt.want:
			t.Errorf("parseBaseURL(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestLoopbackHosts(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		"localhost": true, "LocalHost": true, "localhost.": true,
		"127.0.0.1": true, "127.255.255.254": true,
		// Loose IPv4 spellings are not recognised: plain http to them is
		// refused, the safe way to be wrong.
		"127.1": false, "127.0.1": false, "0x7f.0.0.1": false, "0x7f000001": false, "2130706433": false, "0177.0.0.1": false,
		"::1": true, "[::1]": true, "0:0:0:0:0:0:0:1": true, "::ffff:127.0.0.1": true,
		"128.0.0.1": false, "126.255.255.255": false, "10.0.0.1": false, "0.0.0.0": false,
		"localhost.example.com": false, "example.com": false, "127.0.0.1.nip.io": false,
		"127.0.0.256": false, "0x7g.0.0.1": false, "08.0.0.1": false, "": false, "::": false,
	}
	for host, want := range tests {
		if got := isLoopbackHost(host); got != want {
			t.Errorf("isLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// recordingTransport answers 200 {} without a network and records what it
// was asked to send.
type recordingTransport struct {
	mu   sync.Mutex
	urls []string
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.urls = append(rt.urls, r.URL.String())
	rt.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
}

// Rule 6: the API key is never sent over plain http except to loopback; the
// check is made for every request, before anything is sent.
func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		base     string
		wantSent bool
	}{
		{"https://api.openemail.uk", true},
		{"https://203.0.113.7:8443", true},
		{"http://localhost:2222", true},
		{"http://LOCALHOST", true},
		{"http://127.0.0.1:8080", true},
		{"http://127.200.1.9", true},
		{"http://[::1]:8080", true},
		{"localhost:2222", true}, // scheme-less local: http
		{"http://api.openemail.uk", false},
		{"http://10.0.0.5:8080", false},
		{"http://128.0.0.1", false},
		{"http://localhost.evil.example", false},
		{"http://127.0.0.1.nip.io", false},
		{"http://127.1", false}, // loose IPv4 forms are not taken for loopback
		{"http://0x7f.0.0.1", false},
		{"http://[2001:db8::1]", false},
	}
	calls := map[string]func(context.Context, *Client) error{
		"send":   func(ctx context.Context, c *Client) error { _, err := c.Emails.Send(ctx, sampleEmail()); return err },
		"get":    func(ctx context.Context, c *Client) error { _, err := c.Emails.Get(ctx, "em_1"); return err },
		"raw":    func(ctx context.Context, c *Client) error { return c.Do(ctx, "GET", "/domains", nil, nil) },
		"cancel": func(ctx context.Context, c *Client) error { _, err := c.Broadcasts.Cancel(ctx, "br_1"); return err },
	}
	for _, tt := range tests {
		for name, run := range calls {
			t.Run(tt.base+"/"+name, func(t *testing.T) {
				t.Parallel()
				rt := &recordingTransport{}
				c, err := New(WithAPIKey(testAPIKey), WithBaseURL(tt.base), WithHTTPClient(&http.Client{Transport: rt}))
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				err = run(context.Background(), c)
				sent := len(rt.urls) > 0
				if sent != tt.wantSent {
					t.Fatalf("sent = %v (err %v), want %v", sent, err, tt.wantSent)
				}
				if !tt.wantSent && !errors.Is(err, ErrInsecureBaseURL) {
					t.Errorf("err = %v, want ErrInsecureBaseURL", err)
				}
				if err != nil && strings.Contains(err.Error(), testAPIKey) {
					t.Errorf("error %q contains the API key", err)
				}
			})
		}
	}
}

func TestRequestPaths(t *testing.T) {
	t.Parallel()
	b, err := parseBaseURL("https://gw.example.com/prefix")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string
	}{
		{"/emails", "https://gw.example.com/prefix/emails"},
		{"/emails?status=sent&limit=2", "https://gw.example.com/prefix/emails?status=sent&limit=2"},
		{"/emails/a%2Fb", "https://gw.example.com/prefix/emails/a%2Fb"},
		{"emails", ""},
		{"//evil.example/emails", ""},
		{`/\evil.example`, ""},
		{"/emails\nX-Injected: 1", ""},
		{"/emails\x7f", ""},
		{"", ""},
	}
	for _, tt := range tests {
		u, err := b.resolve(tt.path)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("resolve(%q) = %s, want an error", tt.path, u)
		case tt.want != "" && (err != nil || u.String() != tt.want):
			t.Errorf("resolve(%q) = %v, %v; want %s", tt.path, u, err, tt.want)
		case err != nil && !errors.Is(err, ErrInvalidRequest):
			t.Errorf("resolve(%q) error %v is not ErrInvalidRequest", tt.path, err)
		}
	}
}

// Ids are escaped as one path segment (url.PathEscape); an empty or all-dots
// id would name the collection or a parent and is refused.
func TestIDPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id, want string
	}{
		{"em_123", "/emails/em_123/cancel"},
		{"a/b c", "/emails/a%2Fb%20c/cancel"},
		{"x?y#z", "/emails/x%3Fy%23z/cancel"},
		{"é", "/emails/%C3%A9/cancel"},
		{"a..b", "/emails/a..b/cancel"},
		{"%2F", "/emails/%252F/cancel"},
		{"", ""},
		{".", ""},
		{"..", ""},
		{"...", ""},
	}
	for _, tt := range tests {
		got, err := idPath("/emails", tt.id, "/cancel")
		if tt.want == "" {
			if err == nil || !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("idPath(%q) = %q, %v; want ErrInvalidRequest", tt.id, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("idPath(%q) = %q, %v; want %q", tt.id, got, err, tt.want)
		}
	}
}

func TestCheckBaseURL(t *testing.T) {
	for base, wantErr := range map[string]bool{
		"http://127.0.0.1:8025":   false,
		"http://localhost:8025":   false,
		"https://api.example.com": false,
		"http://fake-api:8025":    true,
		"http://10.0.0.7":         true,
	} {
		c, err := New(WithAPIKey("oe_test_checkbase00000000"), WithBaseURL(base))
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		err = c.CheckBaseURL()
		if gotErr := errors.Is(err, ErrInsecureBaseURL); gotErr != wantErr {
			t.Errorf("%s: CheckBaseURL() = %v, want insecure=%v", base, err, wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "checkbase") {
			t.Errorf("%s: error shows the key: %v", base, err)
		}
	}
}
