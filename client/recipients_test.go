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
		wantOut string
		wantErr bool
	}{
		{`"a@example.com"`, Recipients{"a@example.com"}, `["a@example.com"]`, false},
		{`["a@example.com","b@example.com"]`, Recipients{"a@example.com", "b@example.com"}, `["a@example.com","b@example.com"]`, false},
		{`[]`, Recipients{}, `[]`, false},
		{`null`, nil, `[]`, false},
		{`""`, Recipients{""}, `[""]`, false},
		{`[1]`, nil, "", true},
		{`{"a":1}`, nil, "", true},
		{`42`, nil, "", true},
	}
	for _, tt := range tests {
		var r Recipients
		err := json.Unmarshal([]byte(tt.in), &r)
		if (err != nil) != tt.wantErr {
			t.Errorf("Unmarshal(%s) err = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if !reflect.DeepEqual(r, tt.want) {
			t.Errorf("Unmarshal(%s) = %#v, want %#v", tt.in, r, tt.want)
		}
		out, err := json.Marshal(r)
		if err != nil || string(out) != tt.wantOut {
			t.Errorf("Marshal(%#v) = %s, %v; want %s", r, out, err, tt.wantOut)
		}
	}
}
