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
		scheme := "https://"
		if isLocalHostLiteral(hostOfSchemeless(s)) {
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

// hostOfSchemeless extracts the host of "host[:port][/path]" or
// "[v6]:port/path" before a scheme is known.
func hostOfSchemeless(s string) string {
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		s = s[:i]
	}
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "]"); i >= 0 {
			return s[1:i]
		}
		return s
	}
	if strings.Count(s, ":") > 1 { // bare IPv6 such as ::1
		return s
	}
	if i := strings.LastIndex(s, ":"); i >= 0 {
		return s[:i]
	}
	return s
}

// isLocalHostLiteral reports the hosts that get http:// when no scheme is
// given: loopback and the unspecified addresses (which are then refused with
// a helpful message rather than an https connection failure).
func isLocalHostLiteral(host string) bool {
	return isLoopbackHost(host) || isUnspecifiedHost(host)
}

// isLoopbackHost reports localhost, ::1, and any IPv4 address in 127.0.0.0/8
// in any form inet_aton accepts (127.1, 0x7f.0.0.1, 2130706433), since those
// all reach this machine.
func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip, ok := parseLooseIPv4(host); ok {
		return ip>>24 == 127
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().IsLoopback()
	}
	return false
}

// isUnspecifiedHost reports 0.0.0.0 (in any inet_aton form) and ::.
func isUnspecifiedHost(host string) bool {
	host = strings.Trim(host, "[]")
	if ip, ok := parseLooseIPv4(host); ok {
		return ip == 0
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().IsUnspecified()
	}
	return false
}

// parseLooseIPv4 parses an IPv4 address the way inet_aton does: one to four
// parts, each decimal, octal (leading 0) or hex (0x), the last part filling
// the remaining bytes. Hostnames canonicalise this way in browsers and URL
// parsers, so "127.1" must count as loopback.
func parseLooseIPv4(s string) (uint32, bool) {
	if s == "" {
		return 0, false
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return 0, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, ok := parseIPv4Part(p)
		if !ok {
			return 0, false
		}
		vals[i] = v
	}
	var ip uint64
	for i := 0; i < len(vals)-1; i++ {
		if vals[i] > 0xff {
			return 0, false
		}
		ip |= vals[i] << (24 - 8*uint(i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*uint(5-len(vals))) {
		return 0, false
	}
	return uint32(ip | last), true
}

func parseIPv4Part(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := 10
	switch {
	case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	for i := 0; i < len(p); i++ {
		if !isDigitInBase(p[i], base) {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(p, base, 32)
	if err != nil {
		return 0, false
	}
	return v, true
}

func isDigitInBase(c byte, base int) bool {
	switch base {
	case 8:
		return c >= '0' && c <= '7'
	case 16:
		return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
	default:
		return c >= '0' && c <= '9'
	}
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

// escapeID percent-encodes an id for one path segment (RFC 3986 unreserved
// characters and !*'() stay as they are), and refuses the empty id and
// all-dots ids, which would name the collection or a parent instead.
func escapeID(id string) (string, error) {
	if strings.Trim(id, ".") == "" {
		return "", fmt.Errorf("%w: id is empty or only dots", ErrInvalidRequest)
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if isUnreservedOrKept(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String(), nil
}

func isUnreservedOrKept(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!*'()", c) >= 0
}
