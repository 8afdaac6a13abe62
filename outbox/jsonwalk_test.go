package outbox

import (
	"bytes"
	"encoding/json"
	"slices"
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
				names[mem.name] = true
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
