package client_test

import (
	"log/slog"
	"os"
	"time"

	"github.com/sendonce/sendonce/client"
)

// New reads OPENEMAIL_API_KEY and OPENEMAIL_BASE_URL when the options are
// not given. Over plain http the key goes only to loopback hosts, so a local
// fake API needs no TLS.
func ExampleNew() {
	c, err := client.New(
		client.WithAPIKey(os.Getenv("MY_OPENEMAIL_KEY")), // or leave out: OPENEMAIL_API_KEY
		client.WithBaseURL("localhost:2222"),             // becomes http://localhost:2222
		client.WithMaxRetries(2),
		client.WithTimeout(10*time.Second),
		client.WithLogger(slog.Default()),
	)
	if err != nil {
		panic(err)
	}
	_ = c
}
