package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Validation reads a payload's fields from its text in place (issue 26,
// enqueue near the floor). Decoding it into a map[string]json.RawMessage,
// as it did, copied every member and cost about half of EnqueueMany's Go
// time. scanPayload checks a payload and reads its members in one pass;
// the other functions take JSON text it accepted, and return slices of it.

// jsonMember is one member of a JSON object: its name, decoded, and its
// value's text. The name is bytes, most often of the text itself (a name
// without escapes), so that reading a member allocates nothing.
type jsonMember struct {
	name  []byte
	value json.RawMessage
}

// jsonObject is the members of a JSON object in their order.
type jsonObject []jsonMember

// get returns the value of the member name, or nil. A name given twice
// answers its last value, as encoding/json and jsonb keep.
func (o jsonObject) get(name string) json.RawMessage {
	for i := len(o) - 1; i >= 0; i-- {
		if string(o[i].name) == name {
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
		name := memberName(b[i:end])
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

// memberName decodes the text of a member's name (a JSON string, quotes
// included): the bytes between the quotes, unless it has escapes.
func memberName(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	name, _ := jsonString(raw)
	return []byte(name)
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

// stringElements reports whether valid JSON text b holds an array of
// strings (a null element taken as "", as json.Unmarshal into a []string
// does), as jsonStrings does, and counts them, without decoding them.
func stringElements(b []byte) (n int, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return 0, false
	}
	for e, i := jsonElement(b, 0); e != nil; e, i = jsonElement(b, i) {
		if e[0] != '"' && string(e) != "null" {
			return 0, false
		}
		n++
	}
	return n, true
}

// jsonElement returns the element of the array b (valid JSON text) at or
// after b[i] (0 for its first), and the index to give for the next one;
// nil past the last.
func jsonElement(b []byte, i int) (json.RawMessage, int) {
	i = skipSpace(b, i)
	if i >= len(b) {
		return nil, i
	}
	if b[i] == '[' || b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] == ']' {
		return nil, len(b)
	}
	end := skipValue(b, i)
	return b[i:end], end
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

// maxJSONDepth is encoding/json's limit on nesting: json.Valid refuses a
// text with more than this many arrays and objects open at once.
const maxJSONDepth = 10000

// payloadScan is what scanPayload found in a payload.
type payloadScan struct {
	// valid is whether json.Valid takes the text.
	valid bool
	// notUTF8 is whether the text is not valid UTF-8.
	notUTF8 bool
	// escape says why the text's first unstorable escape (\u0000, an
	// unpaired surrogate) cannot be stored, or is "".
	escape string
	// isObject is whether the text holds an object; members are then its
	// members, as jsonMembers gives them.
	isObject bool

	b        []byte
	depth    int
	nonASCII bool
}

// scanPayload reads a payload once (issue 44, Go's share of EnqueueMany):
// it checks its syntax as json.Valid does, finds what PostgreSQL cannot
// store as jsonb (invalid UTF-8, the escape \u0000, unpaired UTF-16
// surrogate escapes: refused here, they leave the caller's transaction
// usable, where the database's error would abort it), and splits an
// object into its members, appended to members[:0] (a buffer reused
// across a call's intents). It replaces json.Valid, a scan for those
// escapes and jsonMembers in a row, which read each payload three times
// (about 2 ms per 1,000 intents, with 11 allocations each);
// FuzzScanPayload holds it to their answers.
func scanPayload(b []byte, members jsonObject) (jsonObject, payloadScan) {
	s := payloadScan{b: b}
	members = members[:0]
	i := skipSpace(b, 0)
	if i < len(b) && b[i] == '{' {
		s.isObject = true
		if members == nil {
			members = make(jsonObject, 0, 8)
		}
		i, members = s.object(i, members, true)
	} else {
		i = s.value(i)
	}
	if i >= 0 && skipSpace(b, i) == len(b) {
		s.valid = true
		s.notUTF8 = s.nonASCII && !utf8.Valid(b)
	}
	return members, s
}

// value scans the value at b[i], and returns the index past it, or -1
// when it is not valid JSON.
func (s *payloadScan) value(i int) int {
	b := s.b
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return s.str(i)
	case c == '{':
		i, _ = s.object(i, nil, false)
		return i
	case c == '[':
		return s.array(i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || '0' <= c && c <= '9':
		return number(b, i)
	}
	return -1
}

// object scans the object at b[i]; when top is set, it appends the
// object's members to members.
func (s *payloadScan) object(i int, members jsonObject, top bool) (int, jsonObject) {
	b := s.b
	if s.depth++; s.depth > maxJSONDepth {
		return -1, members
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		s.depth--
		return i + 1, members
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1, members
		}
		name := i
		end := s.str(i)
		if end < 0 {
			return -1, members
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return -1, members
		}
		i = skipSpace(b, i+1)
		vstart := i
		if i = s.value(i); i < 0 {
			return -1, members
		}
		if top {
			members = append(members, jsonMember{name: memberName(b[name:end]), value: b[vstart:i]})
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return -1, members
		}
		switch b[i] {
		case '}':
			s.depth--
			return i + 1, members
		case ',':
			i = skipSpace(b, i+1)
		default:
			return -1, members
		}
	}
}

// array scans the array at b[i].
func (s *payloadScan) array(i int) int {
	b := s.b
	if s.depth++; s.depth > maxJSONDepth {
		return -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		s.depth--
		return i + 1
	}
	for {
		if i = s.value(i); i < 0 {
			return -1
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ']':
			s.depth--
			return i + 1
		case ',':
			i = skipSpace(b, i+1)
		default:
			return -1
		}
	}
}

// str scans the string at b[i], noting its first unstorable escape and
// whether it holds bytes beyond ASCII (checked as UTF-8 once, at the end).
func (s *payloadScan) str(i int) int {
	b := s.b
	for i++; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c >= 0x80:
			s.nonASCII = true
			i++
		case c != '\\':
			i++
		case i+1 >= len(b):
			return -1
		default:
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hexAt(b, i+2)
				if !ok {
					return -1
				}
				i += 6
				if s.escape != "" {
					continue
				}
				switch {
				case r == 0:
					s.escape = `holds the escape \u0000, which PostgreSQL cannot store`
				case r >= 0xDC00 && r <= 0xDFFF:
					s.escape = fmt.Sprintf(`holds the unpaired surrogate escape \u%04x`, r)
				case r >= 0xD800 && r <= 0xDBFF:
					// A high surrogate pairs with the low one escaped right
					// after it, which is then not read on its own.
					if i+1 >= len(b) || b[i] != '\\' || b[i+1] != 'u' {
						s.escape = fmt.Sprintf(`holds the unpaired surrogate escape \u%04x`, r)
						continue
					}
					lo, ok := hexAt(b, i+2)
					if !ok {
						return -1
					}
					if lo < 0xDC00 || lo > 0xDFFF {
						s.escape = fmt.Sprintf(`holds the unpaired surrogate escape \u%04x`, r)
						continue
					}
					i += 6
				}
			default:
				return -1
			}
		}
	}
	return -1
}

// hexAt decodes the four hex digits at b[i:i+4].
func hexAt(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// literal scans the literal word at b[i].
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// number scans the number at b[i], JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

// digits returns the index past the digits from b[i].
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
