package main

import "testing"

// --lease is how long a worker's liveness lease lasts past its last
// heartbeat (issue 24); a lease too short to renew, or none, is refused up
// front.
func TestWorkRefusesABadLease(t *testing.T) {
	t.Parallel()
	wantDurationRefused(t, "--lease", "SENDONCE_LEASE", "100ms", "too short from the environment", "want 500ms or more")
}
