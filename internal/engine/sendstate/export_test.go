package sendstate

import "github.com/sendonce/sendonce/internal/base/store"

// PruneBoundSQL is store.PruneBoundSQL, for the test of its reads.
const PruneBoundSQL = store.PruneBoundSQL
