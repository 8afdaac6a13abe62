package main

import (
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

// TestSecretFlagsWarn: --webhook-secret and --api-key stay (docs/webhooks.md
// and the tests use them), but a secret on the command line is in every local
// user's ps, so the fake says so once at start, naming the flag and the
// variable to use instead, and never the secret. From the environment: no
// warning.
func TestSecretFlagsWarn(t *testing.T) {
	const secret = "whsec_LEAKCHECK_31f0"
	var stderr syncbuf.Buffer
	_, stop := serve(t, []string{"--addr", "127.0.0.1:0", "--webhook-secret", secret, "--api-key", "oe_test_LEAKCHECK_k1"}, nil, &stderr)
	if code := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{"WARN", "--webhook-secret", "OPENEMAIL_WEBHOOK_SECRET", "--api-key", "OPENEMAIL_FAKE_API_KEYS", "ps"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr does not mention %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "LEAKCHECK") {
		t.Errorf("a secret was printed:\n%s", out)
	}

	var quiet syncbuf.Buffer
	_, stop = serve(t, []string{"--addr", "127.0.0.1:0"}, map[string]string{"OPENEMAIL_WEBHOOK_SECRET": secret, "OPENEMAIL_FAKE_API_KEYS": "oe_test_LEAKCHECK_k1"}, &quiet)
	if code := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, quiet.String())
	}
	if out := quiet.String(); strings.Contains(out, "WARN") || strings.Contains(out, "LEAKCHECK") {
		t.Errorf("secrets from the environment: a warning or a secret printed:\n%s", out)
	}
}
