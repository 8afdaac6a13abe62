package demo_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/cmd/internal/ops/demo"
	"github.com/sendonce/sendonce/internal/base/store"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
	"github.com/sendonce/sendonce/migrations"
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
// 4 declined, 36 sent once each, replays after the kill, one bounce and the
// next email to that address suppressed; and the webhook secret the
// workers got shown nowhere. With wantHook, the status hook set emailed_at
// once for each of the 36 invoices sent, the replayed ones among them;
// without, the demo said it skipped the hook.
//
// With keep set, the demo keeps its throwaway cluster up after the report
// (Options.Keep): keep runs with the output so far once the demo says so,
// and then the demo is stopped as by Ctrl-C.
func runDemo(t *testing.T, databaseURL string, wantHook bool, keep func(out string)) string {
	t.Helper()
	cmd := worker(t)
	var secrets []string // OPENEMAIL_WEBHOOK_SECRET of each worker
	recordSecret := func(ctx context.Context, env []string, args ...string) *exec.Cmd {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "OPENEMAIL_WEBHOOK_SECRET="); ok {
				secrets = append(secrets, v)
			}
		}
		return cmd(ctx, env, args...)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var out, logs syncbuf.Buffer // Options.Out, read while the demo runs; every log line
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// The keep instructions are whole once the status line after the
	// export line is out: the demo writes them line by line.
	kept := &markWriter{w: &out, mark: keptRE, seen: make(chan struct{})}
	if keep != nil {
		go func() {
			select {
			case <-kept.seen:
				keep(out.String())
			case <-runCtx.Done():
			}
			stop()
		}()
	}
	start := time.Now()
	err := demo.Run(runCtx, demo.Options{
		DatabaseURL: databaseURL,
		Out:         kept,
		Keep:        keep != nil,
		Logger: slog.New(slog.NewMultiHandler(testLogger(t).Handler(),
			slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		WorkerCommand: recordSecret,
		Invoices:      40,
		Seed:          7,
	})
	o := out.String()
	if keep != nil && ctx.Err() != nil {
		t.Fatalf("the demo with Keep never said its database stays up:\n%s", o)
	}
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
		"bounced":               1,
		"suppressed":            1,
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
	// The story tells the recovery it shows: the interrupted sends are
	// handed to new jobs within seconds of the kill, not by River's
	// rescuer after a leader's lease lapses.
	if strings.Contains(o, "wait for River's rescuer") || strings.Contains(o, "waiting for the rescuer") ||
		!strings.Contains(o, "gives them new jobs") {
		t.Errorf("the demo's text of the recovery does not match what it shows (replays seconds after the kill)")
	}
	checkHookReport(t, o, wantHook)
	pids := workerPIDs(o)
	if len(pids) != 2 {
		t.Errorf("the demo named %d worker pids, want 2", len(pids))
	}
	assertGone(t, pids)

	// Step 5 tells the bounce and the suppressed reminder, before the report.
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^5\. A bounce comes back\n(?s:.*)^6\. Report$`),
		regexp.MustCompile(`invoice:inv_[0-9a-f]{4}_0040 has delivery status "bounced"`),
		regexp.MustCompile(`charles@example\.org is on the suppression list`),
		regexp.MustCompile(`key "reminder:inv_[0-9a-f]{4}_0040"`),
		regexp.MustCompile(`parked it as "suppressed":\s+0 API calls`),
		regexp.MustCompile(`(?m)^\s+bounced\s+1\s+charles@example\.org, by webhook; now on the suppression list$`),
		regexp.MustCompile(`(?m)^\s+suppressed\s+1\s+the next email to the bounced address; 0 API calls$`),
	} {
		if !want.MatchString(o) {
			t.Errorf("the output does not match %s", want)
		}
	}
	if len(secrets) != 2 || secrets[0] == "" || secrets[0] != secrets[1] {
		t.Fatalf("the workers got webhook secrets %d, want one of this run, the same for both", len(secrets))
	}
	for name, text := range map[string]string{"output": o, "log": logs.String()} {
		if strings.Contains(text, secrets[0]) {
			t.Errorf("the webhook secret shows in the demo's %s", name)
		}
	}
	return o
}

func TestRunOnYourDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDBURL(t)
	// A run killed before its cleanup left the bouncing address on the
	// suppression list: the demo takes it off before its workers start,
	// or the invoice's email would be parked instead of sent.
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO sendonce_suppression (address, reason, source)
		VALUES ('charles@example.org', 'bounced', 'webhook whd_left_by_a_killed_demo')`); err != nil {
		t.Fatal(err)
	}
	// A run killed before its cleanup also left its table and its status
	// hook, enabled: the demo knows the function for its own and replaces
	// it (a function of yours it never touches: TestRunKeepsYourStatusHook).
	pgtest.Exec(t, pool, `CREATE TABLE demo_invoices (id text PRIMARY KEY, emailed_at timestamptz,
		emailed_times int NOT NULL DEFAULT 0)`)
	if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return store.DemoEnableStatusHook(t.Context(), tx) }); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	o := runDemo(t, url, true, nil)

	// On a database of the caller's own, the demo drops its table and its
	// status hook and leaves the outbox rows, and takes the address that
	// bounced off the suppression list.
	conn := wantNoInvoiceTable(t, url)
	wantNoStatusHook(t, conn)
	if !strings.Contains(o, "disabled the status hook and dropped sendonce_on_status") {
		t.Errorf("the cleanup did not say it dropped the status hook")
	}
	var sent, replayed, bounced int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE state = 'sent'), count(*) FILTER (WHERE replayed),
			count(*) FILTER (WHERE delivery_status = 'bounced')
		FROM sendonce_outbox WHERE idempotency_key LIKE 'invoice:inv\_%'`).Scan(&sent, &replayed, &bounced); err != nil {
		t.Fatal(err)
	}
	if want := figure(t, o, "replayed"); sent != 36 || replayed != want || bounced != 1 {
		t.Errorf("outbox left with %d sent, %d replayed, %d bounced; want 36, the report's %d, 1", sent, replayed, bounced, want)
	}
	var reminders []string
	rows, err := conn.Query(t.Context(), `SELECT state FROM sendonce_outbox WHERE idempotency_key LIKE 'reminder:inv\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	if reminders, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(reminders) != 1 || reminders[0] != "suppressed" {
		t.Errorf("reminders left in the outbox in states %q, want one suppressed", reminders)
	}
	var listed int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM sendonce_suppression`).Scan(&listed); err != nil {
		t.Fatal(err)
	}
	if listed != 0 || !strings.Contains(o, "took charles@example.org off the suppression list") {
		t.Errorf("%d addresses left on the suppression list, want 0, and the cleanup said so:\n%s", listed, o)
	}
}

var portRE = regexp.MustCompile(`Up on 127\.0\.0\.1:(\d+) `)

// keptRE matches the demo's instructions for its kept database, through
// the status command that follows the export line and the worker whose
// outbox page shows the run.
var keptRE = regexp.MustCompile(`stays up until you press Ctrl-C[^\n]*\n\s*export DATABASE_URL='[^']+'\n\s*\S+ status\n` +
	`\s*OPENEMAIL_API_KEY=\S+ OPENEMAIL_BASE_URL=\S+ \S+ work [^\n]*\n[^\n]*/outbox/[^\n]*\n`)

// keptWorkRE takes the worker command of the kept instructions apart:
// its environment and its arguments after "work".
var keptWorkRE = regexp.MustCompile(`(?m)^\s*(OPENEMAIL_API_KEY=\S+) (OPENEMAIL_BASE_URL=\S+) \S+ work (.*)$`)

// outboxPageOfKept runs the worker command the kept demo printed (on a
// free port rather than the default one, which another process may hold)
// and returns the outbox page it serves at the URL it printed.
func outboxPageOfKept(t *testing.T, out, databaseURL string) string {
	t.Helper()
	m := keptWorkRE.FindStringSubmatch(out)
	if m == nil {
		t.Errorf("the demo kept its database but printed no worker command:\n%s", out)
		return ""
	}
	args := append([]string{"work"}, strings.Fields(m[3])...)
	cmd := exec.Command(sendonceBin, append(args, "--http-addr", "127.0.0.1:0")...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL, m[1], m[2])
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_, _ = io.Copy(io.Discard, stdout)
		if err := cmd.Wait(); err != nil {
			t.Errorf("the kept demo's worker after SIGTERM: %v\n%s", err, stderr.String())
		}
	}()
	lines := bufio.NewScanner(stdout)
	page := ""
	for page == "" && lines.Scan() {
		if u, ok := strings.CutPrefix(lines.Text(), "sendonce work: the outbox page: "); ok {
			page = u
		}
	}
	if page == "" {
		t.Errorf("the kept demo's worker printed no outbox page URL:\n%s", stderr.String())
		return ""
	}
	resp, err := http.Get(page)
	if err != nil {
		t.Errorf("GET %s: %v", page, err)
		return ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %d, %v", page, resp.StatusCode, err)
	}
	return string(body)
}

// markWriter writes to w and closes seen once what was written matches mark.
type markWriter struct {
	w    *syncbuf.Buffer
	mark *regexp.Regexp
	seen chan struct{}
	once sync.Once
}

func (m *markWriter) Write(p []byte) (int, error) {
	n, err := m.w.Write(p)
	if m.mark.MatchString(m.w.String()) {
		m.once.Do(func() { close(m.seen) })
	}
	return n, err
}

// TestRunOnAThrowawayCluster runs the demo with --keep: after the report,
// the commands it names work on the database it printed, and after Ctrl-C
// the cluster is gone.
func TestRunOnAThrowawayCluster(t *testing.T) {
	t.Parallel()
	var status, page string
	var emailedOnce, invoices int
	o := runDemo(t, "", true, func(out string) {
		m := regexp.MustCompile(`export DATABASE_URL='([^']+)'`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("the demo kept its database but printed no DATABASE_URL:\n%s", out)
			return
		}
		// The application's table, read apart from the report: every
		// invoice (all of them sent) emailed once, by the status hook.
		conn, err := pgx.Connect(t.Context(), m[1])
		if err != nil {
			t.Errorf("connect to the kept database: %v", err)
			return
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE emailed_times = 1 AND emailed_at IS NOT NULL),
				count(*) FROM demo_invoices`).Scan(&emailedOnce, &invoices); err != nil {
			t.Errorf("read demo_invoices on the kept database: %v", err)
		}
		cmd := exec.Command(sendonceBin, "status")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+m[1])
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("sendonce status on the kept database: %v\n%s", err, b)
		}
		status = string(b)
		page = outboxPageOfKept(t, out, m[1])
	})
	if emailedOnce != 36 || invoices != 36 {
		t.Errorf("the kept database's demo_invoices: %d of %d invoices with emailed_at set and emailed_times 1, want 36 of 36",
			emailedOnce, invoices)
	}
	if !regexp.MustCompile(`(?m)^sent\s+36$`).MatchString(status) {
		t.Errorf("sendonce status on the kept database does not count the 36 sent invoices:\n%s", status)
	}
	if !strings.Contains(page, `<span class="n">36</span><span class="l">sent</span>`) {
		t.Errorf("the outbox page of the kept demo's worker does not count the 36 sent invoices:\n%.2000s", page)
	}
	for _, want := range []string{"sendonce status", "sendonce list --state sent", "sendonce work", "http://127.0.0.1:9464/outbox/", "it stays up below"} {
		if !strings.Contains(o, want) {
			t.Errorf("the demo's last lines do not say %q", want)
		}
	}
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
	wantNoStatusHook(t, wantNoInvoiceTable(t, url))
}

// TestRunKeepsYourStatusHook: on a database whose application has a
// sendonce_on_status of its own, enabled, the demo neither replaces nor
// disables it; it skips its own hook, says so, and passes.
func TestRunKeepsYourStatusHook(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDBURL(t)
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `CREATE TABLE my_statuses (key text, transition text)`)
	pgtest.Exec(t, pool, `CREATE FUNCTION sendonce_on_status(s sendonce_status) RETURNS void LANGUAGE sql AS $$
		INSERT INTO my_statuses VALUES (s.idempotency_key, s.transition) $$`)
	pgtest.Exec(t, pool, `SELECT sendonce_status_hook_enable()`)

	o := runDemo(t, url, false, nil)
	if !strings.Contains(o, "SKIPPED: this database has a sendonce_on_status of its own") {
		t.Errorf("the demo did not say it skipped its status hook")
	}
	if strings.Contains(o, "disabled the status hook") {
		t.Errorf("the demo says it disabled the status hook of the application")
	}
	var body string
	var enabled bool
	var sent int
	if err := pool.QueryRow(t.Context(), `SELECT prosrc, EXISTS (SELECT FROM pg_trigger WHERE tgname = 'sendonce_outbox_status_hook'),
			(SELECT count(*) FROM my_statuses WHERE transition = 'sent' AND key LIKE 'invoice:inv\_%')
		FROM pg_proc WHERE proname = 'sendonce_on_status'`).Scan(&body, &enabled, &sent); err != nil {
		t.Fatalf("the application's sendonce_on_status after the demo: %v", err)
	}
	if !strings.Contains(body, "my_statuses") || !enabled {
		t.Errorf("after the demo, sendonce_on_status is %q and the hook enabled: %t; want the application's, enabled", body, enabled)
	}
	if sent != 36 {
		t.Errorf("the application's function was told of %d invoices sent, want the demo's 36 (its hook stayed on)", sent)
	}
	wantNoInvoiceTable(t, url)
}

// checkHookReport checks the report's line of the status hook: with
// wantHook, emailed_at set once for all 36 invoices sent, as many of them
// replayed as the report's "replayed" (at least one, after the kill);
// without, the hook skipped.
func checkHookReport(t *testing.T, o string, wantHook bool) {
	t.Helper()
	if !wantHook {
		if !regexp.MustCompile(`(?m)^\s+emailed_at set once\s+-\s+skipped: this database has a sendonce_on_status of its own$`).MatchString(o) {
			t.Errorf("the report does not say the status hook was skipped")
		}
		return
	}
	if !strings.Contains(o, "CREATE FUNCTION sendonce_on_status(s sendonce_status)") ||
		!strings.Contains(o, "SELECT sendonce_status_hook_enable();") || !strings.Contains(o, "status hook") {
		t.Errorf("step 3 does not show the status hook's SQL")
	}
	m := regexp.MustCompile(`(?m)^\s+emailed_at set once\s+(\d+)\s+of (\d+) invoices sent, (\d+) of them replayed after the kill$`).FindStringSubmatch(o)
	if m == nil {
		t.Errorf("the report has no line \"emailed_at set once N of N invoices sent, K of them replayed after the kill\"")
		return
	}
	once, _ := strconv.Atoi(m[1])
	sent, _ := strconv.Atoi(m[2])
	replayed, _ := strconv.Atoi(m[3])
	if once != 36 || sent != 36 {
		t.Errorf("emailed_at set once for %d of %d invoices sent, want 36 of 36", once, sent)
	}
	if want := figure(t, o, "replayed"); replayed != want || replayed < 1 {
		t.Errorf("emailed_at set once for %d replayed invoices, want the report's %d replayed (at least 1)", replayed, want)
	}
	if !strings.Contains(o, "The status hook\nset each invoice's emailed_at once") {
		t.Errorf("the verdict does not mention the status hook")
	}
}

// wantNoStatusHook checks that the demo disabled the status hook and
// dropped its function from the database of conn.
func wantNoStatusHook(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	var fn, trigger bool
	if err := conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_proc WHERE proname = 'sendonce_on_status'),
		EXISTS (SELECT FROM pg_trigger WHERE tgname = 'sendonce_outbox_status_hook')`).Scan(&fn, &trigger); err != nil {
		t.Fatal(err)
	}
	if fn || trigger {
		t.Errorf("after Run, the function sendonce_on_status is there: %t; the hook's trigger: %t; want neither", fn, trigger)
	}
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
