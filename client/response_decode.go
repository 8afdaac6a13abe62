package client

import "encoding/json"

// Response types decode leniently. A send that the API accepted must not be
// reported as failed because an optional field came back in a shape this
// package did not expect: that would invite the caller to send again. So
// each field is read only when it has the expected JSON type, anything else
// is left zero, and the whole body is always kept in Raw.

// decodeResponse is the shared shape of the response types' UnmarshalJSON:
// the members of data when it is a JSON object (nil otherwise) and a copy of
// data for Raw.
func decodeResponse(data []byte) (map[string]json.RawMessage, json.RawMessage) {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(data, &m)
	if len(data) == 0 {
		return m, nil
	}
	return m, append(json.RawMessage(nil), data...)
}

// field decodes member name of m into a T; when the member is absent or of
// another shape it is T's zero value.
func field[T any](m map[string]json.RawMessage, name string) T {
	var v T
	if raw, ok := m[name]; ok && json.Unmarshal(raw, &v) == nil {
		return v
	}
	var zero T
	return zero
}
