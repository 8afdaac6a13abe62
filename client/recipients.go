package client

import (
	"encoding/json"
	"errors"
)

// Recipients is a list of addresses for to, cc and bcc. It is sent as an
// array, the form the API expects, and reads either an array or a single
// string ("a@example.com"), which the official SDKs accept too.
type Recipients []string

// UnmarshalJSON reads a string as a one-element list, an array of strings as
// the list, and null as nil.
func (r *Recipients) UnmarshalJSON(data []byte) error {
	var one *string
	if err := json.Unmarshal(data, &one); err == nil && one != nil {
		*r = Recipients{*one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return errors.New("recipients: want a string or an array of strings")
	}
	*r = list
	return nil
}
