package client

import (
	"fmt"
	"log/slog"
)

// redacted is what a secret prints as.
const redacted = "[REDACTED]"

// secret holds the API key. Every way Go formats or logs a value is routed to
// "[REDACTED]", so a %v of a config, a slog attribute or a JSON dump cannot
// leak it. Only the transport reads it, with reveal, to set the Authorization
// header.
//
// The key lives inside a closure rather than a string field: fmt prints the
// unexported fields of a struct without calling their methods, so a string
// would show in %+v of any value that embeds a Client or config by value. A
// func prints as an address.
type secret struct{ value func() string }

func newSecret(s string) secret { return secret{value: func() string { return s }} }

// reveal returns the key itself; only the transport and validation call it.
func (s secret) reveal() string {
	if s.value == nil {
		return ""
	}
	return s.value()
}

// String returns a placeholder, never the key.
func (secret) String() string { return redacted }

// GoString returns a placeholder for %#v.
func (secret) GoString() string { return redacted }

// Format prints a placeholder for every verb, including %d and %x, which
// would otherwise bypass String.
func (secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue logs a placeholder.
func (secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON encodes a placeholder.
func (secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText encodes a placeholder.
func (secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// String describes the config without the key. fmt does not call methods of
// unexported fields, so the struct itself must not print its fields.
func (c config) String() string {
	return fmt.Sprintf("config{apiKey:%s maxRetries:%d timeout:%s}", redacted, c.maxRetries, c.timeout)
}

// GoString is String for %#v.
func (c config) GoString() string { return c.String() }

// Format routes every verb to String.
func (c config) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(c.String())) }

// LogValue logs the config without the key.
func (c config) LogValue() slog.Value { return slog.StringValue(c.String()) }
