package outbox

import (
	"encoding/json"
	"testing"

	"github.com/sendonce/sendonce/internal/base/sendjob"
)

// TestJobArgsAsEncodingJSON holds the job arguments EnqueueMany writes by
// hand to what encoding/json writes for sendjob.Args, which River decodes.
func TestJobArgsAsEncodingJSON(t *testing.T) {
	for _, a := range []sendjob.Args{
		{Key: "invoice:inv_4192", IntentKind: "email"},
		{Key: "oe-6f1c2d3e-aaaa-bbbb-cccc-0123456789ab", IntentKind: "batch", RunKey: "billing:2026-12"},
		{Key: "a.b-c_d:e", IntentKind: "broadcast"},
	} {
		want, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if got := jobArgs(a.Key, Kind(a.IntentKind), a.RunKey); got != string(want) {
			t.Errorf("jobArgs(%+v) = %s, encoding/json %s", a, got, want)
		}
	}
}
