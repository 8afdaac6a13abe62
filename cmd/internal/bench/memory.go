package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
	"github.com/sendonce/sendonce/outbox"
)

// Memory is scenario 5: the peak resident memory of the real worker
// process (`sendonce work`) at concurrency 500, with every one of the 500
// sends in flight at once.
type Memory struct {
	// Binary is the sendonce binary; empty builds ./cmd/sendonce once.
	Binary string

	concurrency int
	latency     time.Duration
	n           int
	row         *Row
	inFlight    Samples
	rss         Samples
	buildErr    error
	built       bool
	tmpDir      string
}

// NewMemory returns scenario 5; quick drains fewer intents. binary is the
// sendonce binary to run; empty builds ./cmd/sendonce.
func NewMemory(quick bool, binary string) *Memory {
	// With 1 s per request, 500 slots ask for 500 sends a second, which
	// this machine sustains, so all 500 are in flight at once; with less
	// latency the worker would be bound by the CPU and hold fewer.
	s := &Memory{Binary: binary, concurrency: 500, latency: time.Second, n: 4_000}
	if quick {
		s.n = 2_000
	}
	s.row = &Row{
		Scenario: "5. Memory",
		Measure: fmt.Sprintf("`sendonce work` peak RSS (VmHWM), concurrency %d, %s intents, API latency %s",
			s.concurrency, Thousands(float64(s.n)), s.latency),
		Unit: MiB,
		Goal: Goal{Text: "< 100 MiB", Check: Below(100)},
	}
	return s
}

// Name is "memory".
func (s *Memory) Name() string { return "memory" }

// Rows is the one row.
func (s *Memory) Rows() []*Row { return []*Row{s.row} }

// binary returns the sendonce binary, building it on first use.
func (s *Memory) binary(ctx context.Context, env *Env) (string, error) {
	if s.Binary != "" {
		return s.Binary, nil
	}
	if !s.built {
		s.built = true
		s.buildErr = s.build(ctx, env)
	}
	return filepath.Join(s.tmpDir, "sendonce"), s.buildErr
}

func (s *Memory) build(ctx context.Context, env *Env) error {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	root := filepath.Dir(strings.TrimSpace(string(out)))
	if err != nil || root == "." || root == "" {
		return errors.New("bench: not inside the sendonce module: cannot build ./cmd/sendonce (pass -sendonce)")
	}
	if s.tmpDir, err = os.MkdirTemp("", "sendonce-bench-"); err != nil {
		return err
	}
	env.Logf("memory: building ./cmd/sendonce")
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(s.tmpDir, "sendonce"), sendoncePkg)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: go build ./cmd/sendonce: %v: %s", err, tail(string(out), 400))
	}
	return nil
}

// Run drains once through a separate `sendonce work` process and reads its
// peak RSS once the outbox is drained.
func (s *Memory) Run(ctx context.Context, env *Env) error {
	bin, err := s.binary(ctx, env)
	if err != nil {
		return err
	}
	if err := env.Reset(ctx); err != nil {
		return err
	}
	fake, err := StartFake(s.latency, 2)
	if err != nil {
		return err
	}
	defer fake.Close()
	ob, err := env.Outbox(env.Admin)
	if err != nil {
		return err
	}
	if err := EnqueueBatches(ctx, env.Admin, ob, Intents("mem", s.n), 1000); err != nil {
		return err
	}

	logs := &syncbuf.Buffer{}
	cmd := exec.CommandContext(ctx, bin, "work", "--concurrency", strconv.Itoa(s.concurrency), "--http-addr", "")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+env.URL,
		client.EnvAPIKey+"="+APIKey,
		client.EnvBaseURL+"="+fake.Server.URL(),
	)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 45 * time.Second
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: start sendonce work: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopWorker := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(45 * time.Second):
			_ = cmd.Process.Kill()
			return <-exited
		}
	}

	drainErr := s.waitDrained(ctx, env, exited, logs)
	elapsed := time.Since(t0)
	hwm, rss, statusErr := readVm(cmd.Process.Pid)
	if drainErr != nil {
		_ = stopWorker()
		return drainErr
	}
	if err := stopWorker(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 0 {
			env.Logf("memory: sendonce work ended: %v; output: %s", err, tail(logs.String(), 400))
		}
	}
	if statusErr != nil {
		return statusErr
	}
	inFlight := maxInFlight(fake)
	env.Logf("memory: %d intents in %s, peak %d in flight: VmHWM %.1f MiB, VmRSS %.1f MiB at the end",
		s.n, elapsed.Round(time.Millisecond), inFlight, hwm, rss)
	s.row.Value.Add(hwm)
	s.inFlight.Add(float64(inFlight))
	return nil
}

// waitDrained waits until every intent is sent, the worker exits, or a
// time limit passes.
func (s *Memory) waitDrained(ctx context.Context, env *Env, exited <-chan error, logs *syncbuf.Buffer) error {
	deadline := time.After(3 * time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("bench: sendonce work exited early (%v): %s", err, tail(logs.String(), 400))
		case <-deadline:
			return errors.New("bench: the worker did not drain the outbox within 3 minutes")
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			sent, err := env.CountState(ctx, outbox.StateSent)
			if err != nil {
				return err
			}
			if sent >= s.n {
				return nil
			}
		}
	}
}

// readVm reads VmHWM (peak resident set) and VmRSS of a process, in MiB.
func readVm(pid int) (hwm, rss float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("bench: read the worker's memory: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmHWM:":
			hwm = kb / 1024
		case "VmRSS:":
			rss = kb / 1024
		}
	}
	if hwm == 0 {
		return 0, 0, fmt.Errorf("bench: no VmHWM in /proc/%d/status", pid)
	}
	return hwm, rss, nil
}

// maxInFlight is the most requests the fake had in progress at once.
func maxInFlight(f *Fake) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range f.Server.Requests() {
		end := r.AnsweredAt
		if end.IsZero() {
			continue
		}
		edges = append(edges, edge{r.ReceivedAt, 1}, edge{end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends before starts at the same instant
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak
}

// Notes describe the measurement.
func (s *Memory) Notes() []string {
	return []string{fmt.Sprintf("**5. Memory.** `go build ./cmd/sendonce`, then `sendonce work --concurrency %d --http-addr \"\"` "+
		"as a process of its own (DATABASE_URL, OPENEMAIL_API_KEY and OPENEMAIL_BASE_URL in its environment; its own pool "+
		"sizing) drains %s intents from the fake API, which answers each request after %s so that all %d sends are in "+
		"flight at once (peak in flight seen by the fake: %s, median). VmHWM is read from /proc/PID/status once every row "+
		"is sent, before the worker is stopped.",
		s.concurrency, Thousands(float64(s.n)), s.latency, s.concurrency, Thousands(s.inFlight.Median()))}
}

// Close removes the built binary.
func (s *Memory) Close() error {
	if s.tmpDir != "" {
		return os.RemoveAll(s.tmpDir)
	}
	return nil
}

// tail is the last n bytes of s, trimmed.
func tail(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}
