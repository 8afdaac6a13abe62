package readme_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// quickStart is the README's section whose snippets are one program.
const quickStart = "## Quick start: the library in your program"

// snippets returns the ```go blocks of the README's section titled
// heading, in order.
func snippets(t *testing.T, readme, heading string) []string {
	t.Helper()
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no section %q", heading)
	}
	section := readme[i+len(heading)+2:]
	if j := strings.Index(section, "\n## "); j >= 0 {
		section = section[:j]
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	return out
}

// sectionLines returns the first and last line (1-based) of the README's
// section titled heading: from its heading to the line before the next
// "## " heading, or to the end.
func sectionLines(t *testing.T, readme, heading string) (int, int) {
	t.Helper()
	lines := strings.Split(readme, "\n")
	first := slices.Index(lines, heading)
	if first < 0 {
		t.Fatalf("README.md has no section %q", heading)
	}
	last := len(lines)
	for i := first + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "## ") {
			last = i
			break
		}
	}
	return first + 1, last
}

// userModuleEnv is the environment of the go command in a user's module:
// its own go.mod, no workspace.
var userModuleEnv = []string{"GOFLAGS=-mod=mod", "GOWORK=off"}

// userModule writes files (slash-separated names) into a new module named
// path, as a user's module would be, and makes it require this repository
// at repo, as the README's shell lines do: go mod init, the replace
// directive of a clone (go get @latest would fetch a release instead),
// go mod tidy. It returns the module's directory.
func userModule(t *testing.T, ctx context.Context, repo, path string, files map[string]string) string {
	t.Helper()
	mod := t.TempDir()
	for name, text := range files {
		p := filepath.Join(mod, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, ctx, mod, userModuleEnv, "mod", "init", path)
	goCmd(t, ctx, mod, userModuleEnv, "mod", "edit", "-require", "github.com/sendonce/sendonce@v0.0.0", "-replace", "github.com/sendonce/sendonce="+repo)
	goCmd(t, ctx, mod, userModuleEnv, "mod", "tidy")
	return mod
}

// goCmd runs the go command in dir, failing the test with its output.
func goCmd(t *testing.T, ctx context.Context, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestQuickStart builds the README's quick start as a user's module and runs
// it twice on an empty database: the first run migrates, enqueues and has
// its embedded worker deliver the email (1 delivery at the fake API, its
// "sent" log line on stderr); the second finds the intent sent and sends
// nothing more.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	code := snippets(t, string(readme), quickStart)
	if len(code) < 2 {
		t.Fatalf("the quick start has %d Go snippets, want the program in pieces", len(code))
	}

	mod := userModule(t, ctx, repo, "example.com/invoices", map[string]string{"main.go": strings.Join(code, "\n")})
	bin := filepath.Join(mod, "invoices")
	goCmd(t, ctx, mod, userModuleEnv, "build", "-o", bin, ".")

	fake := fakeapi.NewTest(t, fakeapi.Config{})
	dbURL := pgtest.CreateDB(t, pgtest.ServerURL(t), "quickstart") // empty: not migrated
	api := fake.URL()
	run := func() (string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL,
			"OPENEMAIL_API_KEY=oe_test_quickstart", "OPENEMAIL_BASE_URL="+api)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("the quick start program: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	out, logs := run()
	if !regexp.MustCompile(`^welcome:user_17 sent em_\S+\n$`).MatchString(out) {
		t.Errorf("first run printed %q, want \"welcome:user_17 sent em_…\"", out)
	}
	if !strings.Contains(logs, "msg=sent key=welcome:user_17") {
		t.Errorf("the worker's log has no \"sent\" line for welcome:user_17:\n%s", logs)
	}
	if d := fake.Deliveries(); len(d) != 1 || d[0].IdempotencyKey != "welcome:user_17" {
		t.Fatalf("the fake API delivered %v, want 1 email under welcome:user_17", d)
	}
	out, _ = run()
	if !strings.HasPrefix(out, "welcome:user_17 sent em_") {
		t.Errorf("second run printed %q, want the intent sent", out)
	}
	if n := len(fake.Deliveries()); n != 1 {
		t.Errorf("after a second run the fake API delivered %d emails, want still 1", n)
	}

	// A first run that failed (the API unreachable: it was stopped after
	// the worker's first retry), then a run with the API up: the second
	// sends what the first left and says so; it printed "pending" with no
	// message id, and exited 0.
	failedURL := pgtest.CreateDB(t, pgtest.ServerURL(t), "quickstart_failed")
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "DATABASE_URL="+failedURL,
		"OPENEMAIL_API_KEY=oe_test_quickstart", "OPENEMAIL_BASE_URL=http://127.0.0.1:1") // nothing listens there
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), `msg="send failed, will retry" key=welcome:user_17`) {
	}
	_ = cmd.Process.Kill()
	_, _ = io.Copy(io.Discard, stderr)
	_ = cmd.Wait()
	pool, err := pgxpool.New(ctx, failedURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Its next attempt is due in 3 s, as a later retry's backoff leaves it:
	// the next run reads its state before any worker could send it.
	if tag, err := pool.Exec(ctx, `UPDATE sendonce_outbox SET next_attempt_at = now() + interval '3 seconds'
		WHERE idempotency_key = 'welcome:user_17' AND state <> 'sent'`); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("the failed run left no unsent intent: %v, %v", tag, err)
	}
	up := fakeapi.NewTest(t, fakeapi.Config{}) // an API of its own: the first one holds the key delivered
	dbURL, api = failedURL, up.URL()
	out, _ = run()
	if !regexp.MustCompile(`^welcome:user_17 sent em_\S+\n$`).MatchString(out) {
		t.Errorf("the run after a failed one printed %q, want \"welcome:user_17 sent em_…\"", out)
	}
	if d := up.Deliveries(); len(d) != 1 || d[0].IdempotencyKey != "welcome:user_17" {
		t.Errorf("after the failed run, the fake API delivered %v, want 1 email under welcome:user_17", d)
	}
	t.Logf("quick start: %d snippets, 1 email delivered", len(code))
}
