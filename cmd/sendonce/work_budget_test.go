package main

import (
	"bytes"
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// --max-pause bounds a Retry-After's pause of the fleet (issue 22, hole
// 15); a pause that is no pause, or a negative one, is refused up front.
func TestWorkRefusesABadMaxPause(t *testing.T) {
	t.Parallel()
	base := workEnv(pgtest.NewDBURL(t), fakeapi.NewTest(t, fakeapi.Config{}))
	env := maps.Clone(base)
	env["SENDONCE_MAX_PAUSE"] = "0"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"negative", base, []string{"--max-pause", "-1s"}},
		{"zero", base, []string{"--max-pause", "0"}},
		{"zero from the environment", env, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A worker that took the value would run until stopped: the
			// deadline stops it, and the exit code tells.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			args := append([]string{"work", "--http-addr", ""}, tc.args...)
			code := run(ctx, args, mapEnv(tc.env), strings.NewReader(""), &out, &errb)
			wantError(t, result{code, out.String(), errb.String()}, 2, "--max-pause", "want a positive duration")
		})
	}
}
