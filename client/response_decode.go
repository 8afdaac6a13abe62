package client

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Response types decode leniently. A send that the API accepted must not be
// reported as failed because an optional field came back in a shape this
// package did not expect: that would invite the caller to send again. So
// each field is read only when it has the expected JSON type, anything else
// is left zero, and the whole body is always kept in Raw.

// fieldsOf returns the members of a JSON object, or nil for any other value.
func fieldsOf(data []byte) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	return m
}

func getString(m map[string]json.RawMessage, name string) string {
	var s string
	if raw, ok := m[name]; ok && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

func getBool(m map[string]json.RawMessage, name string) (value, ok bool) {
	raw, present := m[name]
	if !present {
		return false, false
	}
	if err := json.Unmarshal(raw, &value); err != nil {
		return false, false
	}
	return value, bytes.Equal(bytes.TrimSpace(raw), []byte("true")) || bytes.Equal(bytes.TrimSpace(raw), []byte("false"))
}

func getInt(m map[string]json.RawMessage, name string) int {
	var n json.Number
	if raw, ok := m[name]; ok && json.Unmarshal(raw, &n) == nil {
		if i, err := strconv.ParseInt(n.String(), 10, 0); err == nil {
			return int(i)
		}
		if f, err := strconv.ParseFloat(n.String(), 64); err == nil && f == float64(int(f)) {
			return int(f)
		}
	}
	return 0
}

func getStrings(m map[string]json.RawMessage, name string) []string {
	var r Recipients
	if raw, ok := m[name]; ok && json.Unmarshal(raw, &r) == nil {
		return []string(r)
	}
	return nil
}

func getTime(m map[string]json.RawMessage, name string) *time.Time {
	s := getString(m, name)
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil
	}
	return &t
}

func cloneRaw(data []byte) json.RawMessage {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return append(json.RawMessage(nil), data...)
}
