package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestRecipients(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Recipients
		wantErr bool
	}{
		{`"a@example.com"`, Recipients{"a@example.com"}, false},
		{`["a@example.com","b@example.com"]`, Recipients{"a@example.com", "b@example.com"}, false},
		{`[]`, Recipients{}, false},
		{`null`, nil, false},
		{`""`, Recipients{""}, false},
		{`[1]`, nil, true},
		{`{"a":1}`, nil, true},
		{`42`, nil, true},
	}
	for _, tt := range tests {
		var p EmailParams
		err := json.Unmarshal([]byte(`{"to":`+tt.in+`}`), &p)
		if (err != nil) != tt.wantErr {
			t.Errorf("Unmarshal(%s) err = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !reflect.DeepEqual(p.To, tt.want) {
			t.Errorf("Unmarshal(%s) = %#v, want %#v", tt.in, p.To, tt.want)
		}
	}
	// Encoded, a list is always an array.
	out, err := json.Marshal(EmailParams{To: Recipients{"a@example.com"}})
	if err != nil || string(out) != `{"to":["a@example.com"]}` {
		t.Errorf("Marshal = %s, %v", out, err)
	}
}
