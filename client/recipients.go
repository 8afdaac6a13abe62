package client

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Recipients is a list of addresses for to, cc and bcc. It reads a single
// string ("a@example.com") or an array, and always writes an array, which is
// the form the API expects (the official SDKs listify a single string too).
type Recipients []string

// MarshalJSON writes an array, also for a nil list ([]).
func (r Recipients) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("[]"), nil
	}
	return json.Marshal([]string(r))
}

// UnmarshalJSON reads a string as a one-element list, an array of strings as
// the list, and null as nil.
func (r *Recipients) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.Equal(data, []byte("null")):
		*r = nil
		return nil
	case len(data) > 0 && data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*r = Recipients{s}
		return nil
	case len(data) > 0 && data[0] == '[':
		var list []string
		if err := json.Unmarshal(data, &list); err != nil {
			return errors.New("recipients: array must hold only strings")
		}
		if list == nil {
			list = []string{}
		}
		*r = list
		return nil
	}
	return errors.New("recipients: want a string or an array of strings")
}
