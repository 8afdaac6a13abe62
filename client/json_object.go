package client

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The params types (EmailParams and friends) are stored as JSON by the outbox
// and decoded again by a worker, possibly in another process, possibly after
// a crash. Two things follow, and this file provides both:
//
//   - Nothing may be lost on the way: fields this package does not model are
//     kept in Extra and written back untouched.
//   - The bytes sent must be the same every time for the same params, or a
//     retried send with the same idempotency key would differ from the first
//     and be refused (422 idempotency_key_reuse). So fields are written in a
//     fixed order, Extra's keys sorted, and numbers in free-form objects keep
//     their original text.

// instantLayout is how the API wants instants: UTC, milliseconds, Z.
const instantLayout = "2006-01-02T15:04:05.000Z"

// formatInstant renders t as the API expects.
func formatInstant(t time.Time) string { return t.UTC().Format(instantLayout) }

// objectWriter writes a JSON object field by field, in call order.
type objectWriter struct {
	buf bytes.Buffer
	err error
}

func newObjectWriter() *objectWriter {
	w := &objectWriter{}
	w.buf.WriteByte('{')
	return w
}

// field writes name: json(v).
func (w *objectWriter) field(name string, v any) {
	if w.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		w.err = fmt.Errorf("%s: %w", name, err)
		return
	}
	w.raw(name, b)
}

// raw writes name: b, b being JSON already.
func (w *objectWriter) raw(name string, b []byte) {
	if w.err != nil {
		return
	}
	if w.buf.Len() > 1 {
		w.buf.WriteByte(',')
	}
	k, _ := json.Marshal(name)
	w.buf.Write(k)
	w.buf.WriteByte(':')
	w.buf.Write(b)
}

// str writes a string field when it is not empty.
func (w *objectWriter) str(name, v string) {
	if v != "" {
		w.field(name, v)
	}
}

// recipients writes a list field when it is not empty.
func (w *objectWriter) recipients(name string, v Recipients) {
	if len(v) > 0 {
		w.field(name, v)
	}
}

// instant writes a time field when it is set.
func (w *objectWriter) instant(name string, t *time.Time) {
	if t != nil {
		w.field(name, formatInstant(*t))
	}
}

// object writes a map field when it is non-nil, as {} when empty: the API
// wants these fields as objects, never as arrays or null.
func objectField[M ~map[string]V, V any](w *objectWriter, name string, m M) {
	if m == nil {
		return
	}
	if len(m) == 0 {
		w.raw(name, []byte("{}"))
		return
	}
	w.field(name, m)
}

// extra writes the unmodelled fields, keys sorted. A key that names a
// modelled field is an error: which of the two should win is the caller's
// decision, not this package's.
func (w *objectWriter) extra(extra map[string]json.RawMessage, known map[string]bool) {
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if known[k] {
			w.err = fmt.Errorf("Extra[%q] names a field this type models; set the field instead", k)
			return
		}
		v := extra[k]
		if len(bytes.TrimSpace(v)) == 0 {
			v = json.RawMessage("null")
		}
		if !json.Valid(v) {
			w.err = fmt.Errorf("Extra[%q] is not valid JSON", k)
			return
		}
		w.raw(k, v)
	}
}

func (w *objectWriter) bytes() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	w.buf.WriteByte('}')
	return w.buf.Bytes(), nil
}

// decodeObject splits a JSON object into its fields: each field named in
// known is decoded into its target, every other field is returned as extra
// (nil when there are none). Names are matched exactly, unlike
// encoding/json's case-insensitive match, so "Subject" survives as an extra
// field rather than silently becoming "subject".
func decodeObject(typeName string, data []byte, known map[string]any) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("%s: %w", typeName, err)
	}
	if fields == nil && !bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil, fmt.Errorf("%s: want a JSON object", typeName)
	}
	var extra map[string]json.RawMessage
	for name, raw := range fields {
		target, ok := known[name]
		if !ok {
			if extra == nil {
				extra = make(map[string]json.RawMessage)
			}
			extra[name] = raw
			continue
		}
		if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			continue // null is the same as absent
		}
		if err := decodeInto(raw, target); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", typeName, name, err)
		}
	}
	return extra, nil
}

// decodeInto decodes raw into target. Free-form values (*map[string]any)
// keep numbers as json.Number, so 12345678901234567890 is written back as it
// came instead of as a rounded float.
func decodeInto(raw json.RawMessage, target any) error {
	switch t := target.(type) {
	case **time.Time:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("want an RFC 3339 instant string: %w", err)
		}
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("want an RFC 3339 instant: %w", err)
		}
		ts = ts.UTC()
		*t = &ts
		return nil
	case *map[string]any:
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(t); err != nil {
			return err
		}
		if *t == nil {
			*t = map[string]any{}
		}
		return nil
	case *[]byte:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("want a base64 string: %w", err)
		}
		b, err := decodeBase64Loose(s)
		if err != nil {
			return err
		}
		*t = b
		return nil
	}
	return json.Unmarshal(raw, target)
}

// decodeBase64Loose accepts standard and URL-safe base64, padded or not,
// with whitespace anywhere, as the official SDKs do for attachment content.
func decodeBase64Loose(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
			return -1
		}
		return r
	}, s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("content is not base64")
}

// knownNames returns the set of keys of a decode table.
func knownNames(table map[string]any) map[string]bool {
	names := make(map[string]bool, len(table))
	for k := range table {
		names[k] = true
	}
	return names
}
