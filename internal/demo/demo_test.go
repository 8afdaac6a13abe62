package demo_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sendonce/sendonce/internal/demo"
	"github.com/sendonce/sendonce/internal/pgtest"
	"github.com/sendonce/sendonce/internal/syncbuf"
)

// sendonceBin is the real sendonce binary, built by TestMain; the demo's
// workers are that binary's `work` command, as in `sendonce demo`.
var sendonceBin, buildErr = "", error(nil)

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		sendonceBin, buildErr = buildSendonce()
	}
	pgtest.Main(m)
}

// buildSendonce builds cmd/sendonce next to the test binary: go test
// removes that directory when the run ends.
func buildSendonce() (string, error) {
	dir := os.TempDir()
	if exe, err := os.Executable(); err == nil {
		dir = filepath.Dir(exe)
	}
	bin := filepath.Join(dir, "sendonce-for-demo-test")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sendonce/sendonce/cmd/sendonce")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sendonce: %v\n%s", err, out)
	}
	return bin, nil
}

func worker(t *testing.T) func(ctx context.Context, env []string, args ...string) *exec.Cmd {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the whole demo with worker processes; skipped in -short")
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return func(ctx context.Context, env []string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, sendonceBin, append([]string{"work"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		return cmd
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// figure reads a number of the report, such as "invoices committed".
func figure(t *testing.T, out, label string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(label) + `\s+(\d+)\s`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in the report", label)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var pidRE = regexp.MustCompile(`Worker (\d) \(pid (\d+)\)`)

// workerPIDs are the worker processes the demo said it started.
func workerPIDs(out string) []int {
	var pids []int
	for _, m := range pidRE.FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[2])
		pids = append(pids, pid)
	}
	return pids
}

func assertGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("worker pid %d is still there after Run returned (kill -0: %v)", pid, err)
		}
	}
}

// runDemo runs the demo to the end and checks its report: 40 invoices,
// 4 declined, 36 sent once each, and replays after the kill.
func runDemo(t *testing.T, databaseURL string) string {
	t.Helper()
	cmd := worker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var out syncbuf.Buffer // Options.Out, read while the demo runs
	start := time.Now()
	err := demo.Run(ctx, demo.Options{
		DatabaseURL:   databaseURL,
		Out:           &out,
		Logger:        testLogger(t),
		WorkerCommand: cmd,
		Invoices:      40,
		Seed:          7,
	})
	o := out.String()
	t.Logf("demo output (%s):\n%s", time.Since(start).Round(time.Millisecond), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	for label, want := range map[string]int{
		"invoices committed":    36,
		"invoices rolled back":  4,
		"intents sent":          36,
		"deliveries at the API": 36,
		"duplicates at the API": 0,
	} {
		if got := figure(t, o, label); got != want {
			t.Errorf("%s = %d, want %d", label, got, want)
		}
	}
	if !regexp.MustCompile(`SIGKILL: worker 1 \(pid \d+\) is dead`).MatchString(o) {
		t.Errorf("no worker was killed")
	} else if got := figure(t, o, "replayed"); got < 1 {
		t.Errorf("replayed = %d after a kill in the window, want at least 1", got)
	}
	pids := workerPIDs(o)
	if len(pids) != 2 {
		t.Errorf("the demo named %d worker pids, want 2", len(pids))
	}
	assertGone(t, pids)
	return o
}

func TestRunOnYourDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDBURL(t)
	o := runDemo(t, url)

	// On a database of the caller's own, the demo drops its table and
	// leaves the outbox rows.
	conn := wantNoInvoiceTable(t, url)
	var sent, replayed int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE state = 'sent'), count(*) FILTER (WHERE replayed)
		FROM sendonce_outbox WHERE idempotency_key LIKE 'invoice:inv\_%'`).Scan(&sent, &replayed); err != nil {
		t.Fatal(err)
	}
	if want := figure(t, o, "replayed"); sent != 36 || replayed != want {
		t.Errorf("outbox left with %d sent, %d replayed; want 36 and the report's %d", sent, replayed, want)
	}
}

var portRE = regexp.MustCompile(`Up on 127\.0\.0\.1:(\d+) `)

func TestRunOnAThrowawayCluster(t *testing.T) {
	t.Parallel()
	o := runDemo(t, "")
	m := portRE.FindStringSubmatch(o)
	if m == nil {
		t.Fatal("the demo did not say where its throwaway PostgreSQL runs")
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], time.Second); err == nil {
		conn.Close()
		t.Errorf("the throwaway PostgreSQL on port %s still accepts connections after Run", m[1])
	}
	if !strings.Contains(o, "removed the throwaway PostgreSQL") {
		t.Errorf("the demo did not say it removed the throwaway PostgreSQL")
	}
}

func TestRunCancelledCleansUp(t *testing.T) {
	cmd := worker(t)
	url := pgtest.NewDBURL(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	var out syncbuf.Buffer // Options.Out, read while the demo runs
	done := make(chan error, 1)
	go func() {
		done <- demo.Run(ctx, demo.Options{
			DatabaseURL:   url,
			Out:           &out,
			Logger:        testLogger(t),
			WorkerCommand: cmd,
			Invoices:      40,
		})
	}()

	// Cancel as soon as worker 1 runs, as Ctrl-C would.
	deadline := time.Now().Add(60 * time.Second)
	for len(workerPIDs(out.String())) == 0 {
		select {
		case err := <-done:
			t.Fatalf("Run returned before starting a worker: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker started within 60s:\n%s", out.String())
		}
	}
	cancel()

	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return within 30s of the cancellation:\n%s", out.String())
	}
	t.Logf("demo output:\n%s", out.String())
	assertGone(t, workerPIDs(out.String()))
	wantNoInvoiceTable(t, url)
}

// wantNoInvoiceTable checks that the demo dropped its table from the
// database at url, and returns a connection to it for further checks.
func wantNoInvoiceTable(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var table *string
	if err := conn.QueryRow(t.Context(), `SELECT to_regclass('demo_invoices')::text`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	if table != nil {
		t.Errorf("table demo_invoices is still there after Run")
	}
	return conn
}
