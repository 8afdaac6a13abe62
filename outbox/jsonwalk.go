package outbox

import "encoding/json"

// Validation reads a payload's fields from its text in place (issue 26,
// enqueue near the floor). Decoding it into a map[string]json.RawMessage,
// as it did, copied every member and cost about half of EnqueueMany's Go
// time. These functions take JSON text that json.Valid accepted, and
// return slices of it.

// jsonMember is one member of a JSON object: its name, decoded, and its
// value's text.
type jsonMember struct {
	name  string
	value json.RawMessage
}

// jsonObject is the members of a JSON object in their order.
type jsonObject []jsonMember

// get returns the value of the member name, or nil. A name given twice
// answers its last value, as encoding/json and jsonb keep.
func (o jsonObject) get(name string) json.RawMessage {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].name == name {
			return o[i].value
		}
	}
	return nil
}

// jsonMembers splits valid JSON text holding an object into its members;
// ok is false for any other JSON value. The empty object is non-nil.
func jsonMembers(b []byte) (o jsonObject, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	o = make(jsonObject, 0, 8)
	i = skipSpace(b, i+1)
	if b[i] == '}' {
		return o, true
	}
	for {
		end := skipString(b, i)
		name, _ := jsonString(b[i:end])
		i = skipSpace(b, skipSpace(b, end)+1) // past the colon
		vend := skipValue(b, i)
		o = append(o, jsonMember{name: name, value: b[i:vend]})
		i = skipSpace(b, vend)
		if b[i] == '}' {
			return o, true
		}
		i = skipSpace(b, i+1) // past the comma
	}
}

// jsonElements splits valid JSON text holding an array into its elements'
// texts; ok is false for any other JSON value (nil text included).
func jsonElements(b []byte) (elems []json.RawMessage, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if b[i] == ']' {
		return nil, true
	}
	for {
		end := skipValue(b, i)
		elems = append(elems, b[i:end])
		i = skipSpace(b, end)
		if b[i] == ']' {
			return elems, true
		}
		i = skipSpace(b, i+1) // past the comma
	}
}

// jsonStrings decodes valid JSON text holding an array of strings, a null
// element decoded as "", as json.Unmarshal into a []string does; ok is
// false for any other value.
func jsonStrings(b []byte) ([]string, bool) {
	elems, ok := jsonElements(b)
	if !ok {
		return nil, false
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		if string(e) == "null" {
			continue
		}
		if out[i], ok = jsonString(e); !ok {
			return nil, false
		}
	}
	return out, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index past the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index past the value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // a number, true, false or null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}
