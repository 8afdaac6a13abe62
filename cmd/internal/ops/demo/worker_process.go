package demo

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Worker flags. The timeouts are seconds where production has minutes, so
// the recovery after the kill fits in the demo: River's rescuer reclaims a
// job running longer than rescueAfter, and rescueAfter must exceed
// jobTimeout, which must leave room for the slow answer.
const (
	workerConcurrency = "4"
	jobTimeout        = "3s"
	rescueAfter       = "4s"
	// lease is short so that the killed worker's sends are replayed within
	// a second or two of the kill (the default, 3 s, would add two).
	lease      = "1s"
	apiTimeout = "2s"
)

// workerArgs are the arguments of `sendonce work` for the demo's workers;
// hookAddr is where they take the fake API's webhooks.
func workerArgs(hookAddr string) []string {
	return []string{
		"--concurrency", workerConcurrency,
		"--queue", Queue,
		"--job-timeout", jobTimeout,
		"--rescue-after", rescueAfter,
		"--lease", lease,
		"--api-timeout", apiTimeout,
		"--http-addr=",
		"--log-format", "json",
		"--log-level", "info",
		"--fetch-poll-interval", "200ms",
		"--webhook-addr", hookAddr,
	}
}

// envWebhookSecret is where `sendonce work` reads the webhook signing
// secret: the environment only, as flags show in ps.
const envWebhookSecret = "OPENEMAIL_WEBHOOK_SECRET"

// workerProc is one worker process.
type workerProc struct {
	n    int
	pid  int
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result, set before done is closed
	logs *logTail
}

// startWorker starts worker n through Options.WorkerCommand.
func (d *demo) startWorker(n int) (*workerProc, error) {
	env := []string{
		"DATABASE_URL=" + d.dbURL,
		"OPENEMAIL_API_KEY=" + demoAPIKey,
		"OPENEMAIL_BASE_URL=" + d.fake.URL(),
		envWebhookSecret + "=" + d.hookSecret,
	}
	cmd := d.opts.WorkerCommand(d.procCtx, env, workerArgs(d.hookAddr)...)
	if cmd.Env == nil {
		cmd.Env = append(os.Environ(), env...)
	}
	logs := newLogTail(d.log.With("worker", n), 30)
	if cmd.Stdout == nil {
		cmd.Stdout = logs
	}
	if cmd.Stderr == nil {
		cmd.Stderr = logs
	}
	// A process group of its own: Ctrl-C at the terminal reaches the demo
	// only, which then stops its workers in order; and a signal to the
	// group also reaches whatever a custom WorkerCommand wraps the worker in.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	setParentDeathSignal(cmd.SysProcAttr)
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start worker %d: %w", n, err)
	}
	w := &workerProc{n: n, pid: cmd.Process.Pid, done: make(chan struct{}), logs: logs}
	d.workers = append(d.workers, w)
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	return w, nil
}

// exited reports whether the process has exited.
func (w *workerProc) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the worker's process group.
func (w *workerProc) signal(sig syscall.Signal) {
	if !w.exited() {
		_ = syscall.Kill(-w.pid, sig)
	}
}

// kill is the crash: SIGKILL, which no process can catch or delay, then
// wait until it is gone.
func (w *workerProc) kill() {
	w.signal(syscall.SIGKILL)
	<-w.done
}

// stop asks the worker to finish its sends and exit (SIGTERM), and kills
// it if it has not exited within grace. It returns whether it had to kill,
// and the exit error.
func (w *workerProc) stop(grace time.Duration) (killed bool, err error) {
	w.signal(syscall.SIGTERM)
	select {
	case <-w.done:
		return false, w.err
	case <-time.After(grace):
		w.kill()
		return true, w.err
	}
}

// died describes a worker that exited when it should not have.
func (w *workerProc) died() error {
	return fmt.Errorf("demo: worker %d (pid %d) exited unexpectedly (%v); its last lines:\n%s", w.n, w.pid, w.err, w.logs.tail())
}

// logTail forwards a process's output, line by line, to a logger at debug
// level, and keeps the last lines for an error message.
type logTail struct {
	log  *slog.Logger
	max  int
	mu   sync.Mutex
	part []byte
	last []string
}

func newLogTail(log *slog.Logger, max int) *logTail {
	return &logTail{log: log, max: max}
}

// Write takes output in any chunks; stdout and stderr may write at once.
func (t *logTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.part = append(t.part, p...)
	for {
		i := bytes.IndexByte(t.part, '\n')
		if i < 0 {
			break
		}
		t.line(string(t.part[:i]))
		t.part = t.part[i+1:]
	}
	return len(p), nil
}

func (t *logTail) line(s string) {
	s = strings.TrimRight(s, "\r")
	if s == "" {
		return
	}
	t.log.Debug("worker output", "line", s)
	t.last = append(t.last, s)
	if len(t.last) > t.max {
		t.last = t.last[len(t.last)-t.max:]
	}
}

func (t *logTail) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.last
	if len(t.part) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(t.part))
	}
	if len(lines) == 0 {
		return "    (no output)"
	}
	return "    " + strings.Join(lines, "\n    ")
}

// errWorkerExit is wrapped by the error for a worker that did not exit 0
// on SIGTERM.
var errWorkerExit = errors.New("worker did not stop cleanly")
