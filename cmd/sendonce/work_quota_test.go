package main

import (
	"strings"
	"testing"
)

// --api-rate takes quotas (issue 23): 500/d and 1000000/mo beside rates.
// What is not a limit is refused with one line naming it, exit 2.
func TestWorkAPIRateQuotas(t *testing.T) {
	t.Parallel()
	_, _, base := newWorkEnv(t)
	env := withEnv(base, "SENDONCE_API_RATE", "0/mo")
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		mentions []string
	}{
		{"unknown unit", base, []string{"--api-rate", "10/fortnight"}, []string{"--api-rate", `unit "fortnight"`, "d or mo"}},
		{"a quota of nothing", base, []string{"--api-rate", "0/d"}, []string{"--api-rate", `"0/d"`, "1 or more"}},
		{"a quota of nothing from the environment", env, nil, []string{"--api-rate", `"0/mo"`, "1 or more"}},
		{"a negative pause", base, []string{"--max-pause", "-1s"}, []string{"--max-pause", "-1s", "want a positive duration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantWorkRefused(t, tc.env, tc.args, tc.mentions...)
		})
	}

	w := startWork(t, base, append(fastArgs, "--api-rate", "20/s,500/d,1000000/mo")...)
	if line := w.stdout.String(); !strings.Contains(line, "api-rate=20/s,500/d,1000000/mo ") {
		t.Errorf("start line %q, want it to name the rate and the quotas", line)
	}
	w.stop()
}
