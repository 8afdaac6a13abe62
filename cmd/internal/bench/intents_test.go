package bench

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestEmailParamsIsPayload checks that the River + client baseline sends
// the very email the outbox stores, so the two drains send the same bytes'
// worth.
func TestEmailParamsIsPayload(t *testing.T) {
	for _, i := range []int{0, 7, 12345} {
		var stored, built map[string]any
		if err := json.Unmarshal(Payload(i), &stored); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(EmailParams(Recipient(i), i))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &built); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(stored, built) {
			t.Errorf("email %d: Payload %v, EmailParams %v", i, stored, built)
		}
	}
}
