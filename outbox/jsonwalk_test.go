package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzJSONWalkAgreesWithEncodingJSON holds the in-place readers of
// validation to what encoding/json decodes from the same valid text: an
// object's members (the last of a repeated name winning), an array's
// elements, an array of strings. `go test` runs the seeds; `go test -fuzz
// FuzzJSONWalk ./outbox` searches further.
func FuzzJSONWalkAgreesWithEncodingJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`, `[]`, `null`, `"x"`, `12`, `true`, ` { "a" : 1 , "b" : [ 1 , { "c" : "]}" } ] } `,
		`{"to":"a@b.c","to":["x@y.z"]}`, `{"t\u006f":["a@b.c"],"to\"":1}`, `{"a":"\\","b":"\"}"}`,
		`{"emails":[{"from":"a"},null,{"to":[null,"b"]}]}`, `[null,"a","\u00e9",1]`, `["a",["b"]]`,
		`{"n":-1.5e+3,"t":true,"f":false,"z":null}`, "{\n\t\"a\"\r:\n[\n]\n}", `[{"a":[]},{}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) {
			return // validation reads only storable text (storableJSON)
		}
		var m map[string]json.RawMessage
		err := json.Unmarshal(b, &m)
		o, ok := jsonMembers(b)
		switch {
		case err != nil || m == nil:
			if ok {
				t.Fatalf("%s: jsonMembers reads an object; encoding/json: %v", b, err)
			}
		case !ok:
			t.Fatalf("%s: jsonMembers reads no object; encoding/json %v", b, m)
		default:
			names := map[string]bool{}
			for _, mem := range o {
				names[string(mem.name)] = true
			}
			if len(names) != len(m) {
				t.Fatalf("%s: %d names, encoding/json %d", b, len(names), len(m))
			}
			for k, v := range m {
				if got := o.get(k); !bytes.Equal(got, v) {
					t.Fatalf("%s: %q is %s, encoding/json %s", b, k, got, v)
				}
			}
		}

		var elems []json.RawMessage
		err = json.Unmarshal(b, &elems)
		got, ok := jsonElements(b)
		isArray := bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("["))
		if ok != isArray || (ok && err != nil) {
			t.Fatalf("%s: jsonElements ok=%v; encoding/json: %v", b, ok, err)
		}
		if ok && !slices.EqualFunc(got, elems, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			t.Fatalf("%s: elements %q, encoding/json %q", b, got, elems)
		}

		var strs []string
		err = json.Unmarshal(b, &strs)
		gotStrs, ok := jsonStrings(b)
		if isArray && ok != (err == nil) {
			t.Fatalf("%s: jsonStrings ok=%v; encoding/json: %v", b, ok, err)
		}
		if ok && !slices.Equal(gotStrs, strs) && !(len(gotStrs) == 0 && len(strs) == 0) {
			t.Fatalf("%s: strings %q, encoding/json %q", b, gotStrs, strs)
		}
	})
}

// FuzzScanPayload holds scanPayload, validation's one pass over a payload,
// to the three it replaced: json.Valid for the syntax, storableJSON for
// what PostgreSQL stores, jsonMembers for an object's members. `go test
// -fuzz FuzzScanPayload ./outbox` searches further.
func FuzzScanPayload(f *testing.F) {
	for _, seed := range []string{
		``, ` `, `{}`, `[]`, `null`, `"x"`, `12`, `-0.5e-7`, `01`, `1.`, `-`, `1e`, `.5`, `tru`, `true `, `nul`,
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1 "b":2}`, `{a:1}`, `{"a":1}}`, `[[[]]`, `{"a":[1,{"b":"c"}]}`,
		`{"to":"a@b.c","to":["x@y.z"]}`, `{"t\u006f":["a@b.c"],"to\"":1}`, `{"a":"\\","b":"\"}"}`,
		`{"a":"\u0000"}`, `{"a":"\ud800"}`, `{"a":"\udc00"}`, `{"a":"\ud800\udc00"}`, `{"a":"\ud800\ud800"}`,
		`{"a":"\ud800x"}`, `{"a":"\ud800\n"}`, `{"a":"\u00zz"}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}",
		"{\"a\":\"\u00e9\"}", "\xff", `{"a":"\ud800\u0000"}`, `{"a":"\u0000","b":"` + "\xff" + `"}`,
		`{"emails":[{"from":"a"},null,{"to":[null,"b"]}]}`, "{\n\t\"a\"\r:\n[\n]\n}", `[{"a":[]},{}]`,
		strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth),
		strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
		`{"a":` + strings.Repeat("{\"b\":", maxJSONDepth) + "1" + strings.Repeat("}", maxJSONDepth+1),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		members, scan := scanPayload(b, nil)
		if valid := json.Valid(b); scan.valid != valid {
			t.Fatalf("%q: scanPayload valid=%v, json.Valid %v", b, scan.valid, valid)
		}
		if !scan.valid {
			return
		}
		reason := storableJSON(b)
		got := scan.escape
		if scan.notUTF8 {
			got = "is not valid UTF-8"
		}
		if got != reason {
			t.Fatalf("%q: scanPayload says %q, storableJSON %q", b, got, reason)
		}
		if reason != "" {
			return // validation reads only storable text
		}
		o, isObject := jsonMembers(b)
		if scan.isObject != isObject {
			t.Fatalf("%q: scanPayload isObject=%v, jsonMembers %v", b, scan.isObject, isObject)
		}
		if !slices.EqualFunc(members, o, func(a, b jsonMember) bool {
			return bytes.Equal(a.name, b.name) && bytes.Equal(a.value, b.value)
		}) {
			t.Fatalf("%q: scanPayload members %q, jsonMembers %q", b, members, o)
		}
	})
}

// storableJSON says why a valid JSON text cannot be stored as jsonb, or
// returns "": the check validation made before scanPayload, kept as
// FuzzScanPayload's reference.
func storableJSON(b []byte) string {
	if !utf8.Valid(b) {
		return "is not valid UTF-8"
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			i++
			if b[i] != 'u' {
				continue
			}
			r := hex4(b[i+1 : i+5])
			i += 4
			switch {
			case r == 0:
				return `holds the escape \u0000, which PostgreSQL cannot store`
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Sprintf(`holds the unpaired surrogate escape \u%04x`, r)
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
					return fmt.Sprintf(`holds the unpaired surrogate escape \u%04x`, r)
				}
				if lo := hex4(b[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
					return fmt.Sprintf(`holds the unpaired surrogate escape \u%04x`, r)
				}
				i += 6
			}
		}
	}
	return ""
}

// hex4 decodes the four hex digits of a \u escape of valid JSON.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
