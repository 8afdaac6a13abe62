package main

import "testing"

// --max-pause bounds a Retry-After's pause of the fleet (issue 22, hole
// 15); a pause that is no pause, or a negative one, is refused up front.
func TestWorkRefusesABadMaxPause(t *testing.T) {
	t.Parallel()
	_, _, base := newWorkEnv(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"negative", base, []string{"--max-pause", "-1s"}},
		{"zero", base, []string{"--max-pause", "0"}},
		{"zero from the environment", withEnv(base, "SENDONCE_MAX_PAUSE", "0"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantWorkRefused(t, tc.env, tc.args, "--max-pause", "want a positive duration")
		})
	}
}
