package sendstate

// PruneBoundSQL is pruneBoundSQL, for the test of its reads.
const PruneBoundSQL = pruneBoundSQL
