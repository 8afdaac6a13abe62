package main

import "testing"

// --lease is how long a worker's liveness lease lasts past its last
// heartbeat (issue 24); a lease too short to renew, or none, is refused up
// front.
func TestWorkRefusesABadLease(t *testing.T) {
	t.Parallel()
	_, _, base := newWorkEnv(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"negative", base, []string{"--lease", "-1s"}},
		{"zero", base, []string{"--lease", "0"}},
		{"too short from the environment", withEnv(base, "SENDONCE_LEASE", "100ms"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantWorkRefused(t, tc.env, tc.args, "--lease", "want 500ms or more")
		})
	}
}
