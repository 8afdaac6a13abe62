package suppress

import (
	"encoding/json"
	"testing"
)

func TestStrip(t *testing.T) {
	cases := []struct {
		name, kind, body string
		suppressed       []string
		want             string
		none             bool
	}{
		{"nothing suppressed", "email", `{"to":"a@x.io","subject":"<b>"}`, nil, `{"to":"a@x.io","subject":"<b>"}`, false},
		{"one of two", "email", `{"to":["a@x.io","Bo <B@x.io>"],"subject":"<b>"}`, []string{"b@x.io"}, `{"subject":"<b>","to":["a@x.io"]}`, false},
		{"the only to", "email", `{"to":"A@x.io","cc":["c@x.io"]}`, []string{"a@x.io"}, ``, true},
		{"cc emptied", "template", `{"to":["a@x.io"],"cc":"c@x.io","bcc":["c@x.io"]}`, []string{"c@x.io"}, `{"to":["a@x.io"]}`, false},
		{"a broadcast is left alone", "broadcast", `{"audienceId":"aud"}`, []string{"a@x.io"}, `{"audienceId":"aud"}`, false},
		{"batch drops an email", "batch", `{"emails":[{"to":"a@x.io"},{"to":["b@x.io","c@x.io"]}]}`, []string{"a@x.io", "c@x.io"}, `{"emails":[{"to":["b@x.io"]}]}`, false},
		{"batch all gone", "batch", `{"emails":[{"to":"a@x.io"}]}`, []string{"a@x.io"}, ``, true},
		{"the forms taken", "email", `{"to":["\"Bo, B\" <B@X.io>","<b@x.io>"," B@x.io ","a@x.io"]}`, []string{"b@x.io"}, `{"to":["a@x.io"]}`, false},
		// An intent claimed before migration 00013 keeps the body its
		// claim gave it: Strip matches by the rule it was claimed under.
		{"claimed under the old rule", "email", `{"to":["Bo\t<b@x.io>","\"c\"@x.io","a@x.io"]}`, []string{"b@x.io", `"c"@x.io`}, `{"to":["a@x.io"]}`, false},
		{"a spelling refused is no normal form", "email", `{"to":["b@x.io (Bo)","a@x.io"]}`, []string{"a@x.io", ""}, `{"to":["b@x.io (Bo)"]}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, none, err := Strip(c.kind, json.RawMessage(c.body), c.suppressed)
			if err != nil {
				t.Fatal(err)
			}
			if none != c.none || string(got) != c.want {
				t.Errorf("Strip = %s, none %v; want %s, none %v", got, none, c.want, c.none)
			}
		})
	}
	if _, _, err := Strip("email", json.RawMessage(`[1]`), []string{"a@x.io"}); err == nil {
		t.Error("Strip of a body that is not an object: no error")
	}
}
