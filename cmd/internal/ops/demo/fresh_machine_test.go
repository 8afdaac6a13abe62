package demo_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/internal/machine/sysdeps"
)

// TestDemoWithoutPostgreSQL runs `sendonce demo` as a newcomer on a machine
// without PostgreSQL's server binaries would: they are hidden from it (an
// empty SENDONCE_PG_BIN), and installing is off (SENDONCE_NO_INSTALL), so
// it must stop with the one command that installs them, and start nothing.
func TestDemoWithoutPostgreSQL(t *testing.T) {
	t.Parallel()
	worker(t) // builds the binary; skipped in -short
	cmd := exec.CommandContext(t.Context(), sendonceBin, "demo")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "TEST_DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, pgcluster.EnvBinDir+"="+t.TempDir(), sysdeps.EnvNoInstall+"=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("sendonce demo without PostgreSQL: %v, want exit status 1", err)
	}
	msg := stderr.String()
	for _, want := range []string{
		"sendonce: ",
		"PostgreSQL's server binaries (initdb, pg_ctl) not found",
		"install with: " + sysdeps.Command(pgcluster.Binaries), // apt-get install -y postgresql here
		"DATABASE_URL",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Count(strings.TrimSpace(msg), "\n") > 0 {
		t.Errorf("the error is not one line:\n%s", msg)
	}
	if strings.Contains(stdout.String(), "Up on 127.0.0.1") {
		t.Error("the demo started a database anyway")
	}
}
