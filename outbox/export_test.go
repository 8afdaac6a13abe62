package outbox

import (
	"fmt"
	"os"
	"strconv"

	"github.com/sendonce/sendonce/internal/base/store"
)

// KeyHash exposes keyHash to the tests of package outbox_test.
var KeyHash = keyHash

// CopyMin is the fewest new keys EnqueueMany writes with COPY, and
// MaxCopies how many of its calls in one transaction may.
var CopyMin, MaxCopies = copyMin, maxCopies

// CopyColumns are the columns the COPY path writes, in PostgreSQL's binary
// format (see appendCopyRows).
var CopyColumns = store.OutboxCopyColumns

// SENDONCE_TEST_COPY_MIN sets copyMin for a run of the tests:
// SENDONCE_TEST_COPY_MIN=1 sends every enqueue that can take it through
// the COPY path, so that the whole suite checks that path's promises.
func init() {
	if v := os.Getenv("SENDONCE_TEST_COPY_MIN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			panic(fmt.Sprintf("SENDONCE_TEST_COPY_MIN=%q: want a count of at least 1", v))
		}
		copyMin, CopyMin = n, n
	}
}
