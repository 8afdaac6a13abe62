package main

import "testing"

// --max-pause bounds a Retry-After's pause of the fleet (issue 22, hole
// 15); a pause that is no pause, or a negative one, is refused up front.
func TestWorkRefusesABadMaxPause(t *testing.T) {
	t.Parallel()
	wantDurationRefused(t, "--max-pause", "SENDONCE_MAX_PAUSE", "0", "zero from the environment", "want a positive duration")
}
