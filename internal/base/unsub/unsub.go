// Package unsub makes and checks one-click unsubscribe tokens (RFC 8058)
// and the List-Unsubscribe headers that carry them. A token names an
// address and a topic and is signed with HMAC-SHA256 under the operator's
// secret, so the endpoint that takes it needs no lookup, and a token for
// one address cannot unsubscribe another. Tokens signed under a previous
// secret stay valid while that secret is configured (rotation).
package unsub

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// MinSecretLen is the shortest secret a Signer takes.
const MinSecretLen = 16

// Path is where the endpoint takes tokens: PATH + TOKEN.
const Path = "/u/"

// Header names and the one-click value.
const (
	HeaderList    = "List-Unsubscribe"
	HeaderPost    = "List-Unsubscribe-Post"
	OneClickValue = "List-Unsubscribe=One-Click"
)

// ErrBadToken is returned for a token that is malformed or signed by no
// configured secret.
var ErrBadToken = errors.New("unsub: the unsubscribe link is not valid")

// Signer signs tokens with its first secret and accepts tokens signed by
// any of them. It never prints its secrets.
type Signer struct {
	secrets [][]byte
	base    string // https://host[/prefix], without a trailing slash
	mailto  string // an address, or ""
}

// New returns a Signer for the base URL (the public address of the
// endpoint's listener: https://mail.example.com, to which Path and the
// token are appended), an optional mailto address, the current secret and
// any previous ones still accepted. The errors name the setting, never a
// secret's value.
func New(base, mailto, secret string, previous ...string) (*Signer, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname()))) ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("unsub: unsubscribe URL %q: want https://host[/path] (http only for a loopback host)", base)
	}
	if mailto != "" && (strings.ContainsAny(mailto, "<>?, \t\r\n") || !strings.Contains(mailto, "@")) {
		return nil, fmt.Errorf("unsub: unsubscribe mailto %q: want a bare address", mailto)
	}
	s := &Signer{base: strings.TrimRight(base, "/"), mailto: mailto}
	for i, sec := range append([]string{secret}, previous...) {
		sec = strings.TrimSpace(sec)
		if sec == "" && i > 0 {
			continue
		}
		if len(sec) < MinSecretLen {
			if i == 0 {
				return nil, fmt.Errorf("unsub: the unsubscribe secret is %d characters: want at least %d", len(sec), MinSecretLen)
			}
			return nil, fmt.Errorf("unsub: previous unsubscribe secret %d is %d characters: want at least %d", i, len(sec), MinSecretLen)
		}
		s.secrets = append(s.secrets, []byte(sec))
	}
	return s, nil
}

func isLoopback(h string) bool {
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}

// String names the Signer without its secrets.
func (s Signer) String() string {
	return fmt.Sprintf("unsub.Signer{url: %s, secrets: %d}", s.base, len(s.secrets))
}

// GoString is String, so %#v prints no secret either.
func (s Signer) GoString() string { return s.String() }

func mac(secret []byte, address, topic string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sendonce-unsubscribe\x00"))
	m.Write([]byte(topic))
	m.Write([]byte{0})
	m.Write([]byte(address))
	return m.Sum(nil)
}

var enc = base64.RawURLEncoding

// Token signs (address, topic), both in their normal forms, with the
// current secret: base64url(topic NUL address) "." base64url(HMAC).
func (s *Signer) Token(address, topic string) string {
	return enc.EncodeToString([]byte(topic+"\x00"+address)) + "." + enc.EncodeToString(mac(s.secrets[0], address, topic))
}

// Verify returns the address and topic a token names when one of the
// secrets signed it, and ErrBadToken otherwise.
func (s *Signer) Verify(token string) (address, topic string, err error) {
	body, sig, ok := strings.Cut(token, ".")
	if !ok || len(token) > 1024 {
		return "", "", ErrBadToken
	}
	b, err1 := enc.DecodeString(body)
	m, err2 := enc.DecodeString(sig)
	if err1 != nil || err2 != nil {
		return "", "", ErrBadToken
	}
	topic, address, ok = strings.Cut(string(b), "\x00")
	if !ok || topic == "" || address == "" {
		return "", "", ErrBadToken
	}
	for _, sec := range s.secrets {
		if hmac.Equal(m, mac(sec, address, topic)) {
			return address, topic, nil
		}
	}
	return "", "", ErrBadToken
}

// URL is the one-click URL of (address, topic).
func (s *Signer) URL(address, topic string) string {
	return s.base + Path + s.Token(address, topic)
}

// Headers are the headers an email of topic to address carries:
// List-Unsubscribe (the URL, and the mailto form when configured) and
// List-Unsubscribe-Post.
func (s *Signer) Headers(address, topic string) map[string]string {
	tok := s.Token(address, topic)
	list := "<" + s.base + Path + tok + ">"
	if s.mailto != "" {
		list += ", <mailto:" + s.mailto + "?subject=" + url.PathEscape("unsubscribe "+tok) + ">"
	}
	return map[string]string{HeaderList: list, HeaderPost: OneClickValue}
}

// Merge returns the email body with headers added to its "headers"
// object (replacing any of the same names, case-insensitively: sendonce's
// are the ones sent).
func Merge(email json.RawMessage, headers map[string]string) (json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(email, &top); err != nil {
		return nil, fmt.Errorf("unsub: email body: %w", err)
	}
	h := map[string]string{}
	if raw, ok := top["headers"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &h); err != nil {
			return nil, fmt.Errorf("unsub: email headers: want an object of strings: %w", err)
		}
	}
	for k := range h {
		for name := range headers {
			if strings.EqualFold(k, name) {
				delete(h, k)
			}
		}
	}
	for k, v := range headers {
		h[k] = v
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	top["headers"] = b
	return json.Marshal(top)
}

// Must is New for tests and constants: it panics on an error.
func Must(base, secret string, previous ...string) *Signer {
	s, err := New(base, "", secret, previous...)
	if err != nil {
		panic(err)
	}
	return s
}
