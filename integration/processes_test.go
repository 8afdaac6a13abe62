package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

// capture is a thread-safe buffer for one stream of one process. Every
// capture of the run is kept, so the secrets check can read all of them.
type capture struct {
	name string
	syncbuf.Buffer
}

var captures struct {
	mu  sync.Mutex
	all []*capture
}

// newCapture registers a named buffer of text to be scanned for secrets.
func newCapture(name string) *capture {
	c := &capture{name: name}
	captures.mu.Lock()
	captures.all = append(captures.all, c)
	captures.mu.Unlock()
	return c
}

// keepText registers text the scenario read (a database dump) for the scan.
func keepText(name, text string) {
	c := newCapture(name)
	c.Write([]byte(text))
}

func allCaptures() []*capture {
	captures.mu.Lock()
	defer captures.mu.Unlock()
	return append([]*capture(nil), captures.all...)
}

// env is what a sendonce process sees: the database, the fake API and its
// key, and nothing of the test's own environment but PATH and HOME.
type env struct {
	DatabaseURL string
	APIKey      string
	BaseURL     string
	Extra       []string
}

func (e env) list() []string {
	out := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"TMPDIR=" + os.TempDir(),
		"TZ=UTC",
	}
	if e.DatabaseURL != "" {
		out = append(out, "DATABASE_URL="+e.DatabaseURL)
	}
	if e.APIKey != "" {
		out = append(out, "OPENEMAIL_API_KEY="+e.APIKey)
	}
	if e.BaseURL != "" {
		out = append(out, "OPENEMAIL_BASE_URL="+e.BaseURL)
	}
	return append(out, e.Extra...)
}

// proc is one running sendonce process, in a process group of its own so
// a kill takes everything it started.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout *capture
	stderr *capture
	done   chan struct{}
	err    error // Wait's result, once done is closed
	killed bool
}

var procs struct {
	mu  sync.Mutex
	all map[*proc]bool
}

// startProc starts sendonce with args. The process (group) is killed when
// the test ends if it is still running.
func startProc(t testing.TB, name string, e env, args ...string) *proc {
	t.Helper()
	return startBinary(t, suite.bin, name, e, args...)
}

// startBinary is startProc for another program than sendonce (an
// application of the suite's that embeds the worker).
func startBinary(t testing.TB, bin, name string, e env, args ...string) *proc {
	t.Helper()
	p := &proc{
		name:   name,
		stdout: newCapture(t.Name() + "/" + name + " stdout"),
		stderr: newCapture(t.Name() + "/" + name + " stderr"),
		done:   make(chan struct{}),
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = e.list()
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = procAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	procs.mu.Lock()
	if procs.all == nil {
		procs.all = map[*proc]bool{}
	}
	procs.all[p] = true
	procs.mu.Unlock()
	go func() {
		p.err = p.cmd.Wait()
		procs.mu.Lock()
		delete(procs.all, p)
		procs.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// pid is the process id, which is also its process group id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the whole process group and waits for the process
// to be gone.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	p.killed = true
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
}

// terminate sends SIGTERM and waits up to timeout for the process to
// exit, then kills it. It returns the exit code (-1 if it had to kill).
func (p *proc) terminate(timeout time.Duration) int {
	if p.running() {
		_ = syscall.Kill(p.pid(), syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return -1
	}
	return exitCode(p.err)
}

// stop is terminate with the check every scenario makes at its end: the
// process exits 0 within 20 s of SIGTERM, or the test fails with its output.
func (p *proc) stop(t testing.TB) {
	t.Helper()
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Errorf("%s: exit %d after SIGTERM, want 0\n%s", p.name, code, p.output())
	}
}

// output is everything the process printed, for failure messages.
func (p *proc) output() string {
	return fmt.Sprintf("--- %s stdout ---\n%s--- %s stderr ---\n%s", p.name, tail(p.stdout.String(), 4000), p.name, tail(p.stderr.String(), 4000))
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// killAll kills every process still running (TestMain's last resort; the
// tests' own cleanups normally got there first).
func killAll() {
	procs.mu.Lock()
	var all []*proc
	for p := range procs.all {
		all = append(all, p)
	}
	procs.mu.Unlock()
	for _, p := range all {
		p.kill()
	}
}

// result is a finished sendonce run.
type result struct {
	stdout, stderr string
	code           int
}

// run runs sendonce to completion with stdin, and captures its output.
func run(t testing.TB, name string, e env, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout := newCapture(t.Name() + "/" + name + " stdout")
	stderr := newCapture(t.Name() + "/" + name + " stderr")
	cmd := exec.CommandContext(ctx, suite.bin, args...)
	cmd.Env = e.list()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = procAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sendonce %s: did not finish in time\n%s%s", strings.Join(args, " "), stdout, stderr)
	}
	code := exitCode(err)
	if code == -1 {
		t.Fatalf("sendonce %s: %v", strings.Join(args, " "), err)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// mustRun runs sendonce and fails the test unless it exits 0.
func mustRun(t testing.TB, name string, e env, stdin io.Reader, args ...string) result {
	t.Helper()
	r := run(t, name, e, stdin, args...)
	if r.code != 0 {
		t.Fatalf("sendonce %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

var helpCache sync.Map // subcommand → help text

// hasFlag reports whether `sendonce SUB --help` lists --flag, so the suite
// passes optional tuning flags only to a command that has them.
func hasFlag(t testing.TB, sub, flag string) bool {
	t.Helper()
	v, ok := helpCache.Load(sub)
	if !ok {
		r := run(t, sub+"-help", env{}, nil, sub, "--help")
		v = r.stdout + r.stderr
		helpCache.Store(sub, v)
	}
	return strings.Contains(v.(string), "--"+flag+" ") || strings.Contains(v.(string), "--"+flag+"=") ||
		strings.Contains(v.(string), "--"+flag+"\n")
}

// workerOptions are the flags of a `sendonce work` process.
type workerOptions struct {
	Concurrency   int
	JobTimeout    time.Duration
	RescueAfter   time.Duration
	APITimeout    time.Duration
	MaxRetries    int // the client's retries within one attempt (0: the command's default)
	MaxAttempts   int
	RateLimitWait time.Duration
	LogLevel      string
	// Defaults leaves every timing (job timeout, rescue, polling,
	// sweeping) at the command's defaults.
	Defaults bool
	// APIRate is --api-rate (none when empty).
	APIRate string
	// Coalesce is --coalesce: up to that many email intents sent in one
	// batch request (0: off, each intent alone).
	Coalesce int
	// PollOnly is --poll-only: no LISTEN/NOTIFY, River and the sweeper poll.
	PollOnly bool
}

// workerArgs renders the options as flags. Timings the suite depends on
// (job timeout, rescue) are always passed; the rest only when the command
// knows the flag.
func workerArgs(t testing.TB, o workerOptions) []string {
	t.Helper()
	if o.Concurrency == 0 {
		o.Concurrency = 10
	}
	if o.JobTimeout == 0 {
		o.JobTimeout = 2 * time.Second
	}
	if o.RescueAfter == 0 {
		o.RescueAfter = 3 * time.Second
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	args := []string{"work",
		"--concurrency", fmt.Sprint(o.Concurrency),
		"--log-format", "json",
		"--log-level", o.LogLevel,
	}
	if !o.Defaults {
		args = append(args, "--job-timeout", o.JobTimeout.String(), "--rescue-after", o.RescueAfter.String())
	}
	optional := []struct {
		flag, value string
		set         bool
	}{
		{"http-addr", "", true},
		{"api-timeout", o.APITimeout.String(), o.APITimeout > 0},
		{"max-retries", fmt.Sprint(o.MaxRetries), o.MaxRetries > 0},
		{"max-attempts", fmt.Sprint(o.MaxAttempts), o.MaxAttempts > 0},
		{"rate-limit-wait", o.RateLimitWait.String(), o.RateLimitWait > 0},
		{"api-rate", o.APIRate, o.APIRate != ""},
		{"coalesce", fmt.Sprint(o.Coalesce), o.Coalesce > 0},
		{"poll-only", "true", o.PollOnly},
		{"fetch-poll-interval", "100ms", !o.Defaults},
		{"sweep-interval", "250ms", !o.Defaults},
		{"shutdown-grace", "10s", true},
	}
	for _, f := range optional {
		if f.set && hasFlag(t, "work", f.flag) {
			args = append(args, "--"+f.flag+"="+f.value)
		}
	}
	return args
}

// startWorker starts one `sendonce work` process.
func startWorker(t testing.TB, name string, e env, o workerOptions) *proc {
	t.Helper()
	return startProc(t, name, e, workerArgs(t, o)...)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// logLines parses the process's JSON log lines (stderr); other lines are
// skipped.
func (p *proc) logLines() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// riverClientID waits for River's "River client started" line and returns
// the client id it names: the id River writes to river_job.attempted_by.
func (p *proc) riverClientID(t testing.TB, timeout time.Duration) string {
	t.Helper()
	id := ""
	waitFor(t, timeout, p.name+" to start its River client", func() (bool, string) {
		if !p.running() {
			t.Fatalf("%s exited before starting: %v\n%s", p.name, p.err, p.output())
		}
		for _, l := range p.logLines() {
			if l["msg"] == "River client started" {
				id, _ = l["client_id"].(string)
				return id != "", ""
			}
		}
		return false, tail(p.stderr.String(), 500)
	})
	return id
}
