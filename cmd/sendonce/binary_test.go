package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

// buildBinary builds the command for the test; under -short it skips the
// test instead.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sendonce")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestBinary checks what only a real process shows: exit statuses, and
// SIGTERM stopping `work` cleanly.
func TestBinary(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	_, fake, environ := newBinaryEnv(t)

	// Bad input: exit 1, one line, nothing on stdout.
	wantError(t, runBinary(t, bin, environ, `{"from": nope}`, "enqueue", "--key", "bin:1"), 1, "malformed JSON")
	// A usage error: exit 2.
	wantError(t, runBinary(t, bin, environ, "", "list", "--state", "lost"), 2, "--state")

	// work: send one, then SIGTERM → exit 0.
	wantOK(t, runBinary(t, bin, environ, emailBody("bin@example.com"), "enqueue", "--key", "bin:2"))
	cmd, lines, stderr := startBinaryWork(t, bin, environ, "sendonce work: queue=sendonce ",
		"--http-addr", "127.0.0.1:0", "--fetch-poll-interval", "50ms", "--log-format", "json")
	ctx := t.Context()
	if err := fake.WaitDeliveries(ctx, 1); err != nil {
		t.Fatal(err)
	}
	stopWork(t, cmd, lines, stderr)
	logs := stderr.String()
	if !strings.Contains(logs, `"msg":"stopped"`) {
		t.Errorf("no JSON \"stopped\" log line:\n%s", logs)
	}
	if strings.Contains(logs, "LEAKCHECK") || strings.Contains(logs, "BODYMARKER") {
		t.Errorf("the API key or a body leaked into the logs:\n%s", logs)
	}
}

// newBinaryEnv makes a migrated database and a fake API for the test and
// returns the database's URL, the fake and the environment of the built
// command against both, and extra (NAME=value each).
func newBinaryEnv(t *testing.T, extra ...string) (dbURL string, fake *fakeapi.Server, environ []string) {
	t.Helper()
	dbURL, fake, _ = newWorkEnv(t)
	environ = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=" + dbURL,
		"OPENEMAIL_API_KEY=" + testAPIKey,
		"OPENEMAIL_BASE_URL=" + fake.URL(),
	}, extra...)
	return dbURL, fake, environ
}

// runBinary runs bin to its end with the environment and stdin given.
func runBinary(t *testing.T, bin string, environ []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = environ
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	r := result{code, stdout.String(), stderr.String()}
	wantNoLeak(t, "sendonce "+strings.Join(args, " "), r)
	return r
}

// startBinaryWork starts `sendonce work` (bin) with the environment and the
// flags given, and waits for its startup line, which must begin with
// prefix. It returns the running command, its stdout from the line after
// the startup line, and its stderr, which is read on a timeout while work
// may still be writing it; stop it with stopWork.
func startBinaryWork(t *testing.T, bin string, environ []string, prefix string, args ...string) (*exec.Cmd, *bufio.Scanner, *syncbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"work"}, args...)...)
	cmd.Env = environ
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(syncbuf.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdoutPipe)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), prefix) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("no startup line: %q\n%s", lines.Text(), stderr.String())
	}
	return cmd, lines, stderr
}

// stopWork sends a running `sendonce work` SIGTERM, drains its stdout and
// waits up to 30 s for it to exit 0.
func stopWork(t *testing.T, cmd *exec.Cmd, stdout *bufio.Scanner, stderr *syncbuf.Buffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		for stdout.Scan() {
		}
		waited <- cmd.Wait()
	}()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("work after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("work did not stop on SIGTERM\n%s", stderr.String())
	}
}
