package client_test

import (
	"encoding/json"
	"fmt"

	"github.com/sendonce/sendonce/client"
)

// Params round-trip through JSON, so an outbox can store the body in the
// caller's transaction and a worker can send it later: a single recipient
// becomes a list, times go out in UTC with milliseconds, and fields this
// package does not model (tracking here) survive untouched in Extra.
func ExampleEmailParams_json() {
	stored := []byte(`{"to":"ada@example.com","subject":"Welcome","scheduledAt":"2030-06-01T14:30:00+02:00","tracking":{"opens":true}}`)

	var params client.EmailParams
	if err := json.Unmarshal(stored, &params); err != nil {
		panic(err)
	}
	body, err := json.Marshal(&params)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))
	fmt.Println(string(params.Extra["tracking"]))

	// Output:
	// {"to":["ada@example.com"],"subject":"Welcome","scheduledAt":"2030-06-01T12:30:00.000Z","tracking":{"opens":true}}
	// {"opens":true}
}
