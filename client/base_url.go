package client

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// DefaultBaseURL is the API's origin. There is no /v1 prefix: paths such as
// /emails are appended directly.
const DefaultBaseURL = "https://api.openemail.uk"

// baseURL is a normalised, validated base URL.
type baseURL struct {
	u *url.URL
	// s is u without a trailing slash; request paths are appended to it.
	s string
}

// parseBaseURL normalises and validates a base URL the way the official SDKs
// do: trim, strip trailing slashes, and give a scheme-less value http:// when
// its host is local (so "localhost:2222" works) and https:// otherwise.
//
// It refuses URLs with user information (a password in a URL ends up in logs
// and error messages; the API key is the credential), the unspecified hosts
// 0.0.0.0 and :: (they are not addresses one can connect to; use 127.0.0.1 or
// [::1]), schemes other than http and https, and queries or fragments (request
// paths are appended to the base). Error messages never repeat the URL, since
// a refused URL may hold a password.
func parseBaseURL(raw string) (*baseURL, error) {
	s := strings.TrimSpace(raw)
	hasScheme := strings.Contains(s, "://")
	s = strings.TrimRight(s, "/")
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidBaseURL)
	}
	if !hasScheme {
		// http:// only for a local host, as the official SDKs do.
		scheme := "https://"
		if u, err := url.Parse("http://" + s); err == nil && (isLoopbackHost(u.Hostname()) || isUnspecifiedHost(u.Hostname())) {
			scheme = "http://"
		}
		s = scheme + s
	}
	u, err := url.Parse(s)
	if err != nil {
		// url.Error's text includes the URL; keep only that it failed.
		return nil, fmt.Errorf("%w: cannot parse it", ErrInvalidBaseURL)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: user information (user:password@) is not allowed; pass the API key with WithAPIKey", ErrInvalidBaseURL)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: scheme must be http or https", ErrInvalidBaseURL)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("%w: no host", ErrInvalidBaseURL)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, fmt.Errorf("%w: a query or fragment is not allowed", ErrInvalidBaseURL)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: port out of range", ErrInvalidBaseURL)
		}
	}
	if isUnspecifiedHost(u.Hostname()) {
		suggest := "127.0.0.1"
		if strings.Contains(u.Hostname(), ":") {
			suggest = "[::1]"
		}
		if port := u.Port(); port != "" {
			suggest += ":" + port
		}
		return nil, fmt.Errorf("%w: host %s is not an address to connect to; use %s", ErrInvalidBaseURL, u.Hostname(), suggest)
	}
	return &baseURL{u: u, s: strings.TrimRight(u.String(), "/")}, nil
}

// String returns the normalised base URL.
func (b *baseURL) String() string { return b.s }

// secureOrigin reports whether u may carry a credential: https anywhere, or
// plain http to a loopback host (a local fake or tunnel; the key never leaves
// the machine).
func secureOrigin(u *url.URL) bool {
	return u.Scheme == "https" || isLoopbackHost(u.Hostname())
}

// isLoopbackHost reports localhost and the loopback addresses: 127.0.0.0/8
// and ::1, in the forms net/netip parses. Other spellings of an IPv4 address
// (127.1, 0x7f.0.0.1) are not recognised, so plain http to them is refused:
// the rule errs towards keeping the key off the network.
func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// isUnspecifiedHost reports 0.0.0.0 and ::.
func isUnspecifiedHost(host string) bool {
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.Unmap().IsUnspecified()
}

// resolve appends a request path (with optional query) to the base and
// checks the result: the path must start with exactly one '/' (a "//" or
// "/\" start would name another host), hold no control characters, and the
// final URL must keep the base's scheme, host and port.
func (b *baseURL) resolve(path string) (*url.URL, error) {
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") || strings.HasPrefix(path, `/\`) {
		return nil, fmt.Errorf("%w: path must start with a single '/'", ErrInvalidRequest)
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c < 0x20 || c == 0x7f {
			return nil, fmt.Errorf("%w: path contains a control character", ErrInvalidRequest)
		}
	}
	u, err := url.Parse(b.s + path)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot parse path", ErrInvalidRequest)
	}
	if u.Scheme != b.u.Scheme || u.Host != b.u.Host || u.User != nil {
		return nil, fmt.Errorf("%w: path leaves the base URL's origin", ErrInvalidRequest)
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}
