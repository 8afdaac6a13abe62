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

// --lease is how long a worker's liveness lease lasts past its last
// heartbeat (issue 24); a lease too short to renew, or none, is refused up
// front.
func TestWorkRefusesABadLease(t *testing.T) {
	t.Parallel()
	base := workEnv(pgtest.NewDBURL(t), fakeapi.NewTest(t, fakeapi.Config{}))
	env := maps.Clone(base)
	env["SENDONCE_LEASE"] = "100ms"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"negative", base, []string{"--lease", "-1s"}},
		{"zero", base, []string{"--lease", "0"}},
		{"too short from the environment", env, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A worker that took the value would run until stopped: the
			// deadline stops it, and the exit code tells.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			args := append([]string{"work", "--http-addr", ""}, tc.args...)
			code := run(ctx, args, mapEnv(tc.env), strings.NewReader(""), &out, &errb)
			wantError(t, result{code, out.String(), errb.String()}, 2, "--lease", "want 500ms or more")
		})
	}
}
