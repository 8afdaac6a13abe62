package client

import (
	"encoding/json"
	"testing"
)

func TestDecodeBase64Loose(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"aGk/Pz8+", "aGk_Pz8-", "aGk/Pz8+\n", "aGk/ Pz8+", "aGk_Pz8-"} {
		b, err := decodeBase64Loose(in)
		if err != nil || string(b) != "hi???>" {
			t.Errorf("decodeBase64Loose(%q) = %q, %v", in, b, err)
		}
	}
	if _, err := decodeBase64Loose("not base64!"); err == nil {
		t.Error("accepted non-base64")
	}
}

// Free-form maps keep large integers exactly.
func TestFreeFormNumbersKeepTheirText(t *testing.T) {
	t.Parallel()
	var p TemplateSendParams
	if err := json.Unmarshal([]byte(`{"props":{"id":9007199254740993,"f":1.10}}`), &p); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(p)
	if want := `{"props":{"f":1.10,"id":9007199254740993}}`; string(out) != want {
		t.Errorf("got %s, want %s", out, want)
	}
}
