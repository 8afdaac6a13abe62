package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// RateLimited is scenario 6: a fleet of three `sendonce work` processes
// draining a backlog through an API that allows 20 requests a second per
// API key and answers 429, with no Retry-After, beyond that. Once with the
// limit configured (--api-rate 20/s), once with none, so the fleet must
// find it from the 429s. The figure is how much of the limit became
// accepted requests (the budget used), beside the share of requests
// refused; a fleet that ignores the limit has nearly all of them refused,
// and one that backs off too far leaves the budget unused.
//
// At 20 a second the drain takes as long as it takes (3,000 intents are
// 150 s a row), so the scenario measures once per benchmark however many
// runs the others make.
type RateLimited struct {
	// Binary is the sendonce binary; empty builds ./cmd/sendonce once.
	Binary string

	n           int // intents per row
	workers     int // `sendonce work` processes
	concurrency int // --concurrency of each
	limit       int // the fake's limit, requests per second per key
	cells       []*rateCell
	riverDB     *Figure  // the River baseline's database CPU per job, µs
	riverWAL    *Figure  // the River baseline's WAL per job, bytes
	extra       []string // more `sendonce work` flags for every worker
	ran         bool
	built       bool
	buildErr    error
	tmpDir      string
}

// rateCell is one row: one drain with or without --api-rate.
type rateCell struct {
	name    string // "configured" or "discovered"
	apiRate string // --api-rate, or "" to find the limit from 429s
	row     *Row

	requests, refused, span, failed, duplicates *Figure
	dbPerIntent, dbPerSecond                    *Figure // database CPU, µs
	walPerIntent                                *Figure // WAL written, bytes
	cpuDB, cpuWorkers                           Samples // µs per intent
}

// NewRateLimited returns scenario 6; quick drains 600 intents instead of
// 3,000. binary is the sendonce binary to run; empty builds ./cmd/sendonce.
func NewRateLimited(quick bool, binary string) *RateLimited {
	s := &RateLimited{Binary: binary, n: 3_000, workers: 3, concurrency: 10, limit: 20,
		riverDB:  &Figure{Name: "River + limiter DB CPU/job", Unit: Micros},
		riverWAL: &Figure{Name: "River + limiter WAL/job", Unit: Bytes}}
	if quick {
		s.n = 600
	}
	rate := strconv.Itoa(s.limit) + "/s"
	for _, c := range []struct {
		name, apiRate, how, goal string
		budget, share            float64
		noDuplicates             bool
	}{
		{"configured", rate, "`--api-rate " + rate + "`", "budget used ≥ 90%, 429s ≤ 2%, 0 failed, 0 duplicates, DB CPU/intent ≤ 1 ms", 0.9, 0.02, true},
		{"discovered", "", "no `--api-rate` (limit found from 429s)", "budget used ≥ 70%, 429s ≤ 10%, 0 failed, DB CPU/intent ≤ 1 ms", 0.7, 0.1, false},
	} {
		cell := &rateCell{
			name:       c.name,
			apiRate:    c.apiRate,
			requests:   &Figure{Name: "requests", Unit: Count},
			refused:    &Figure{Name: "429s", Unit: PercentTenths},
			span:       &Figure{Name: "span", Unit: Seconds},
			failed:     &Figure{Name: "failed", Unit: Count},
			duplicates: &Figure{Name: "duplicates", Unit: Count},
			// Issue 23: 5.5 ms per intent when three workers polled the
			// budget's row while they waited.
			dbPerIntent:  &Figure{Name: "DB CPU/intent", Unit: Micros},
			dbPerSecond:  &Figure{Name: "DB CPU/s", Unit: Micros},
			walPerIntent: &Figure{Name: "WAL/intent", Unit: Bytes},
		}
		checks := []func(*Row) bool{RatioAtLeast(c.budget), cell.refused.AtMost(c.share), cell.failed.AtMost(0),
			atMostWhenRead(cell.dbPerIntent, 1000)}
		if c.noDuplicates {
			checks = append(checks, cell.duplicates.AtMost(0))
		}
		cell.row = &Row{
			Scenario: "6. Rate-limited drain",
			Measure: fmt.Sprintf("requests accepted, %s; %d × `sendonce work --concurrency %d`, %s intents, API limit %s per key (429, no Retry-After)",
				c.how, s.workers, s.concurrency, Thousands(float64(s.n)), rate),
			Unit:         Count,
			Baseline:     fmt.Sprintf("budget (%d × span + %d)", s.limit, s.limit),
			BaselineUnit: Count,
			RatioUnit:    Percent,
			Also:         []*Figure{cell.requests, cell.refused, cell.span, cell.failed, cell.duplicates, cell.dbPerIntent, cell.dbPerSecond, cell.walPerIntent, s.riverDB, s.riverWAL},
			Goal:         Goal{Text: c.goal, Check: All(checks...)},
		}
		s.cells = append(s.cells, cell)
	}
	return s
}

// Name is "ratelimit".
func (s *RateLimited) Name() string { return "ratelimit" }

// Rows are one per cell: configured, then discovered.
func (s *RateLimited) Rows() []*Row {
	rows := make([]*Row, len(s.cells))
	for i, c := range s.cells {
		rows[i] = c.row
	}
	return rows
}

// Run drains both cells, on the first run only. A failing cell marks its
// own row and the other goes on.
func (s *RateLimited) Run(ctx context.Context, env *Env) error {
	if s.ran {
		env.Logf("ratelimit: measured once per benchmark (it drains at %d/s); skipping this run", s.limit)
		return nil
	}
	s.ran = true
	bin, err := s.binary(ctx, env)
	if err != nil {
		return err
	}
	for _, c := range s.cells {
		if err := s.drain(ctx, env, bin, c); err != nil {
			if ctx.Err() != nil {
				return err
			}
			env.Logf("ratelimit %s: %v", c.name, err)
			c.row.Err = err
		}
	}
	// What is irreducible: the same work as plain River jobs paced in
	// memory. A failure leaves the figure out, not the rows.
	us, wal, err := s.riverBaseline(ctx, env)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		env.Logf("ratelimit river baseline: %v", err)
		return nil
	}
	env.Logf("ratelimit river baseline: %s jobs, %d River clients of %d, one in-memory limiter at %d/s: database CPU per job %s, WAL per job %s",
		Thousands(float64(s.n)), s.workers, s.concurrency, s.limit, Micros.Format(us), Bytes.Format(wal))
	if us > 0 {
		s.riverDB.Value.Add(us)
	}
	s.riverWAL.Value.Add(wal)
	return nil
}

// binary returns the sendonce binary, building it on first use.
func (s *RateLimited) binary(ctx context.Context, env *Env) (string, error) {
	if s.Binary != "" {
		return s.Binary, nil
	}
	if !s.built {
		s.built = true
		s.tmpDir, s.buildErr = buildSendonce(ctx, env, "ratelimit")
	}
	return filepath.Join(s.tmpDir, "sendonce"), s.buildErr
}

// sendoncePkg is the command the scenarios run, named by import path
// rather than as ./cmd/sendonce: the bench runs from the repository's root
// (make bench) or from its own package's directory (go test), in either of
// the workspace's two modules, and the import path builds from both.
const sendoncePkg = "github.com/sendonce/sendonce/cmd/sendonce"

// buildSendonce builds cmd/sendonce of the checkout the benchmark runs in
// into a new temporary directory, which it returns (the binary is
// "sendonce" in it). who names the scenario in the progress line.
func buildSendonce(ctx context.Context, env *Env, who string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	root := filepath.Dir(strings.TrimSpace(string(out)))
	if err != nil || root == "." || root == "" {
		return "", errors.New("bench: not inside the sendonce module: cannot build ./cmd/sendonce (pass -sendonce)")
	}
	dir, err := os.MkdirTemp("", "sendonce-bench-")
	if err != nil {
		return "", err
	}
	env.Logf("%s: building ./cmd/sendonce", who)
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "sendonce"), sendoncePkg)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return dir, fmt.Errorf("bench: go build ./cmd/sendonce: %v: %s", err, tail(string(out), 400))
	}
	return dir, nil
}

// drain measures one cell: n intents enqueued, then the fleet started and
// run until every intent is sent or failed.
//
// It is long because it is the cell's setup, run and measurement in the
// order they happen, which reads best top to bottom.
func (s *RateLimited) drain(ctx context.Context, env *Env, bin string, c *rateCell) error {
	// backlog resets the database, the fleet's budget too: a rate the
	// previous cell found must not carry over.
	srv, url, intents, err := s.backlog(ctx, env, "rate-"+c.name)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := env.Checkpoint(ctx); err != nil {
		return err
	}

	pgss := env.resetStatements(ctx)
	wal0, err := env.ReadWAL(ctx)
	if err != nil {
		return err
	}
	cpu0, t0 := env.ReadCPU(), time.Now()
	fleet, stopAll, err := s.startFleet(ctx, bin, env.URL, url, c.apiRate)
	if err != nil {
		return err
	}
	defer stopAll()
	failed, rates, waitErr := s.waitSettled(ctx, env, srv, fleet)
	// The database's CPU is read before the workers stop: their backends
	// end with them, and an ended backend's time can no longer be read.
	cpu := env.ReadCPU().Sub(cpu0)
	elapsed := time.Since(t0)
	wal, err := env.WALSince(ctx, wal0)
	if err != nil {
		return err
	}
	if pgss {
		env.Logf("ratelimit %s: per intent, %s", c.name, env.topStatements(ctx, 25, float64(s.n)))
	}
	var workersCPU time.Duration
	for i, p := range fleet {
		if err := p.stop(); err != nil {
			env.Logf("ratelimit %s: worker %d ended: %v; output: %s", c.name, i, err, tail(p.logs.String(), 400))
		}
		workersCPU += p.cpu()
	}
	if waitErr != nil {
		keepLogs(env, "ratelimit-"+c.name, fleet)
		return waitErr
	}

	reqs := srv.Requests()
	if len(reqs) == 0 {
		return errors.New("bench: the fleet sent no request")
	}
	first, last := srv.RequestSpan()
	refused := srv.RateLimited()
	accepted := len(reqs) - refused
	span := last.Sub(first).Seconds()
	budget := float64(s.limit)*span + float64(s.limit) // the fake's bucket starts full
	share := float64(refused) / float64(len(reqs))

	led, err := s.checkLedger(ctx, env, srv, intents)
	if err != nil {
		keepLogs(env, "ratelimit-"+c.name, fleet)
		return err
	}

	env.Logf("ratelimit %s: %s intents in %s: %d requests, %d refused with 429 (%.1f%%), span %.1f s, budget used %.1f%% (%d accepted of %.0f), failed %d, duplicates %d; CPU per intent: database %s, workers %s; WAL per intent %s",
		c.name, Thousands(float64(s.n)), elapsed.Round(time.Millisecond), len(reqs), refused, 100*share, span,
		100*float64(accepted)/budget, accepted, budget, failed, led.duplicates,
		(cpu.DB / time.Duration(s.n)).Round(time.Microsecond), (workersCPU / time.Duration(s.n)).Round(time.Microsecond),
		Bytes.Format(float64(wal)/float64(s.n)))
	env.Logf("ratelimit %s: per 10 s from the first request, accepted/refused: %s", c.name, paceTrace(reqs, first, 10*time.Second))
	env.Logf("ratelimit %s: the fleet's budget every %s (rate/s, 0 before the first lease; 429s that cut it so far): %s",
		c.name, rateSampleEvery, strings.Join(rates, " "))
	env.Logf("ratelimit %s: the fleet's logs: %s", c.name, fleetTrace(fleet))

	c.row.Value.Add(float64(accepted))
	c.row.BaselineValue.Add(budget)
	c.row.Ratio.Add(float64(accepted) / budget)
	c.requests.Value.Add(float64(len(reqs)))
	c.refused.Value.Add(share)
	c.span.Value.Add(span)
	c.failed.Value.Add(float64(failed))
	c.duplicates.Value.Add(float64(led.duplicates))
	if cpu.DB > 0 {
		c.cpuDB.Add(float64(cpu.DB.Microseconds()) / float64(s.n))
		c.dbPerIntent.Value.Add(float64(cpu.DB.Microseconds()) / float64(s.n))
		c.dbPerSecond.Value.Add(float64(cpu.DB.Microseconds()) / elapsed.Seconds())
	}
	c.walPerIntent.Value.Add(float64(wal) / float64(s.n))
	c.cpuWorkers.Add(float64(workersCPU.Microseconds()) / float64(s.n))
	if !c.row.Goal.Check(c.row) {
		keepLogs(env, "ratelimit-"+c.name, fleet)
	}
	return nil
}

// backlog empties the database, starts a fake API that allows s.limit
// requests a second per key, and enqueues s.n intents (keys prefix:i).
func (s *RateLimited) backlog(ctx context.Context, env *Env, prefix string) (*fakeapi.Server, string, []outbox.Intent, error) {
	if err := env.Reset(ctx); err != nil {
		return nil, "", nil, err
	}
	srv := fakeapi.New(fakeapi.Config{APIKeys: []string{APIKey}, Rate: []fakeapi.RateLimit{{Count: s.limit, Per: time.Second}}})
	url, err := srv.Start("127.0.0.1:0")
	if err == nil {
		var ob *outbox.Outbox
		if ob, err = env.Outbox(env.Admin); err == nil {
			intents := Intents(prefix, s.n)
			if err = EnqueueBatches(ctx, env.Admin, ob, intents, 1000); err == nil {
				return srv, url, intents, nil
			}
		}
	}
	srv.Close()
	return nil, "", nil, fmt.Errorf("bench: backlog: %w", err)
}

// ledger is what the fake delivered, against the intents.
type ledger struct {
	duplicates int // deliveries beyond the first of an intent
}

// checkLedger compares the fake's deliveries with the outbox: every sent
// intent delivered exactly once under its key, nothing else delivered. A
// duplicate or a lost email is an error, not a missed goal: the fleet
// broke its promise, and the row says so instead of showing a figure.
func (s *RateLimited) checkLedger(ctx context.Context, env *Env, srv *fakeapi.Server, intents []outbox.Intent) (ledger, error) {
	var l ledger
	want := make(map[string]bool, len(intents))
	for _, in := range intents {
		want[in.Key] = true
	}
	got := map[string]int{}
	unknown := 0
	for _, d := range srv.Deliveries() {
		if !want[d.IdempotencyKey] {
			unknown++
			continue
		}
		got[d.IdempotencyKey]++
		if got[d.IdempotencyKey] > 1 {
			l.duplicates++
		}
	}
	rows, err := env.Admin.Query(ctx, "SELECT idempotency_key FROM sendonce_outbox WHERE state = $1", string(outbox.StateSent))
	if err != nil {
		return l, fmt.Errorf("bench: read sent intents: %w", err)
	}
	lost := 0
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			rows.Close()
			return l, fmt.Errorf("bench: read sent intents: %w", err)
		}
		if got[key] == 0 {
			lost++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return l, fmt.Errorf("bench: read sent intents: %w", err)
	}
	if l.duplicates > 0 || lost > 0 || unknown > 0 {
		return l, fmt.Errorf("bench: EXACTLY-ONCE BROKEN: %d duplicate deliveries, %d intents marked sent but never delivered, %d deliveries of no intent",
			l.duplicates, lost, unknown)
	}
	return l, nil
}

// rateSampleEvery is how often waitSettled reads the fleet's budget, and
// settleCountEvery how often it counts the outbox before the fake has
// delivered every intent.
const (
	rateSampleEvery  = 10 * time.Second
	settleCountEvery = 5 * time.Second
)

// waitSettled waits until every intent is sent or failed and returns how
// many failed, with the fleet's budget read every rateSampleEvery ("11.0
// (9)": the rate, then the 429s that cut it so far) so that the progress
// output shows how the rate moved. It gives up when a worker exits or
// after four times the time the limit allows for the backlog.
func (s *RateLimited) waitSettled(ctx context.Context, env *Env, srv *fakeapi.Server, fleet []*workProc) (failed int, rates []string, err error) {
	limit := time.Duration(4*s.n/s.limit)*time.Second + time.Minute
	deadline := time.After(limit)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	sample := time.NewTicker(rateSampleEvery)
	defer sample.Stop()
	counted := time.Now()
	for {
		select {
		case <-deadline:
			return 0, rates, fmt.Errorf("bench: the fleet did not settle %s intents within %s", Thousands(float64(s.n)), limit)
		case <-ctx.Done():
			return 0, rates, ctx.Err()
		case <-sample.C:
			rates = append(rates, readBudget(ctx, env))
			continue
		case <-tick.C:
		}
		for i, p := range fleet {
			select {
			case err := <-p.exited:
				p.exited = nil
				return 0, rates, fmt.Errorf("bench: worker %d exited early (%v): %s", i, err, tail(p.logs.String(), 400))
			default:
			}
		}
		// The outbox is counted (a scan of every intent, which the row's
		// database CPU would include) only once the fake has delivered
		// them all, or every settleCountEvery to see intents that failed
		// (srv nil: every tick).
		if srv != nil && len(srv.Deliveries()) < s.n && time.Since(counted) < settleCountEvery {
			continue
		}
		counted = time.Now()
		var sent int
		err := env.Admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = $1), count(*) FILTER (WHERE state = $2)
			FROM sendonce_outbox`, string(outbox.StateSent), string(outbox.StateFailed)).Scan(&sent, &failed)
		if err != nil {
			return 0, rates, fmt.Errorf("bench: count settled intents: %w", err)
		}
		if sent+failed >= s.n {
			return failed, rates, nil
		}
	}
}

// readBudget renders the fleet's budget row as "rate (429s that cut it)",
// "none" before the first lease, or "?" when it cannot be read.
func readBudget(ctx context.Context, env *Env) string {
	sts, err := budget.Read(ctx, env.Admin)
	switch {
	case err != nil:
		return "?"
	case len(sts) == 0:
		return "none"
	}
	return fmt.Sprintf("%.1f (%d)", sts[0].Rate, sts[0].Throttles)
}

// workProc is one `sendonce work` process of the fleet.
type workProc struct {
	cmd     *exec.Cmd
	logs    *syncbuf.Buffer
	exited  chan error // receives Wait's error once; nil after it was read
	stopped bool
}

// start starts worker i of the fleet: JSON logs, no HTTP listener (three
// processes cannot share its port), the command's default timings.
func (s *RateLimited) start(ctx context.Context, bin, dbURL, apiURL, apiRate string, i int) (*workProc, error) {
	args := []string{"work", "--concurrency", strconv.Itoa(s.concurrency), "--http-addr", "", "--log-format", "json"}
	if apiRate != "" {
		args = append(args, "--api-rate", apiRate)
	}
	args = append(args, s.extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(workerEnviron(),
		"DATABASE_URL="+dbURL,
		client.EnvAPIKey+"="+APIKey,
		client.EnvBaseURL+"="+apiURL,
	)
	p := &workProc{cmd: cmd, logs: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 45 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start sendonce work %d: %w", i, err)
	}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// startFleet starts the fleet's s.workers workers (start), each given
// apiRate, and returns them with stopAll, which stops every one started:
// for a defer (a worker's stop may be called again).
func (s *RateLimited) startFleet(ctx context.Context, bin, dbURL, apiURL, apiRate string) (fleet []*workProc, stopAll func(), err error) {
	fleet = make([]*workProc, s.workers)
	stopAll = func() {
		for _, p := range fleet {
			if p != nil {
				_ = p.stop()
			}
		}
	}
	for i := range fleet {
		if fleet[i], err = s.start(ctx, bin, dbURL, apiURL, apiRate, i); err != nil {
			stopAll()
			return nil, nil, err
		}
	}
	return fleet, stopAll, nil
}

// workerEnviron is this process's environment without the variables that
// configure sendonce, so a SENDONCE_API_RATE of the caller's cannot turn
// the discovered cell into a configured one.
func workerEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SENDONCE_") || strings.HasPrefix(name, "OPENEMAIL_") || name == "DATABASE_URL" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// stop ends the process with SIGTERM (SIGKILL after 45 s) and returns how
// it ended, nil for a clean exit. It may be called again.
func (p *workProc) stop() error {
	if p.stopped {
		return nil
	}
	p.stopped = true
	if p.exited == nil {
		return nil // it had already exited, which waitSettled reported
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-p.exited:
	case <-time.After(45 * time.Second):
		_ = p.cmd.Process.Kill()
		err = <-p.exited
	}
	p.exited = nil
	return err
}

// cpu is the processor time the process used, once it has exited.
func (p *workProc) cpu() time.Duration {
	if st := p.cmd.ProcessState; st != nil {
		return st.UserTime() + st.SystemTime()
	}
	return 0
}

// paceTrace renders the accepted and refused requests of every window
// from first: "200/0 198/12 …", so a progress line shows how the fleet's
// pace moved.
func paceTrace(reqs []fakeapi.RequestRecord, first time.Time, window time.Duration) string {
	var accepted, refused []int
	for _, r := range reqs {
		i := int(r.ReceivedAt.Sub(first) / window)
		for len(accepted) <= i {
			accepted, refused = append(accepted, 0), append(refused, 0)
		}
		if r.RateLimited {
			refused[i]++
		} else {
			accepted[i]++
		}
	}
	parts := make([]string, len(accepted))
	for i := range accepted {
		parts[i] = fmt.Sprintf("%d/%d", accepted[i], refused[i])
	}
	return strings.Join(parts, " ")
}

// fleetTrace summarises the fleet's logs: how often the budget was cut
// after a 429 and the rates it was cut to, snoozes, failures and warnings.
func fleetTrace(fleet []*workProc) string {
	var rates []string
	throttles, snoozes, failed, warnings := 0, 0, 0, 0
	for _, p := range fleet {
		for line := range strings.Lines(p.logs.String()) {
			var l struct {
				Level string  `json:"level"`
				Msg   string  `json:"msg"`
				Rate  float64 `json:"rate"`
			}
			if json.Unmarshal([]byte(line), &l) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(l.Msg, "budget: the API answered 429"):
				throttles++
				rates = append(rates, strconv.FormatFloat(l.Rate, 'f', -1, 64))
			case l.Msg == "snoozed":
				snoozes++
			case l.Msg == "intent failed":
				failed++
			}
			if l.Level == "WARN" || l.Level == "ERROR" {
				warnings++
			}
		}
	}
	if len(rates) > 12 {
		rates = append(append(rates[:6:6], "…"), rates[len(rates)-6:]...)
	}
	return fmt.Sprintf("%d budget cuts after a 429 (rates, per worker in log order: %s), %d snoozes, %d intents failed, %d warnings or errors",
		throttles, strings.Join(rates, " "), snoozes, failed, warnings)
}

// keepLogs writes the fleet's logs to files when a cell (who: the
// scenario and the cell) fails or misses its goal, and names them in the
// progress output.
func keepLogs(env *Env, who string, fleet []*workProc) {
	dir, err := os.MkdirTemp("", "sendonce-bench-"+who+"-")
	if err != nil {
		env.Logf("%s: cannot keep the workers' logs: %v", who, err)
		return
	}
	for i, p := range fleet {
		if p == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("worker%d.log", i)), []byte(p.logs.String()), 0o644); err != nil {
			env.Logf("%s: cannot keep the workers' logs: %v", who, err)
			return
		}
	}
	env.Logf("%s: the workers' logs are in %s", who, dir)
}

// Notes describe the measurement.
func (s *RateLimited) Notes() []string {
	cpu := func(c *rateCell) string {
		w := Thousands(c.cpuWorkers.Median()) + " µs in the workers"
		if c.cpuWorkers.Len() == 0 {
			return "not measured"
		}
		if c.cpuDB.Len() > 0 {
			return Thousands(c.cpuDB.Median()) + " µs in the database + " + w
		}
		return w + " (the database's backends were not readable)"
	}
	return []string{fmt.Sprintf("**6. Rate-limited drain.** Measured once per benchmark, not once per run: at %d/s "+
		"a row takes %s s. `go build ./cmd/sendonce`; %s intents are enqueued (not timed); then %d `sendonce work "+
		"--concurrency %d --http-addr \"\"` processes, with the command's default timings, drain them through the "+
		"in-process fake API, which allows %d requests a second per API key (a token bucket of %d that starts full) "+
		"and answers 429 with no Retry-After beyond that. Configured: `--api-rate %d/s`; discovered: no `--api-rate`, "+
		"so the fleet starts slow (10/s, doubling with use) and finds the limit from the 429s. From the fake's request "+
		"log: the span from the first request to the last; budget = %d × span + %d; budget used = accepted requests "+
		"(all but the 429s) ÷ budget; 429s = refused ÷ requests. Failed = intents parked `failed`. Every intent marked "+
		"sent must have been delivered exactly once under its key: a duplicate, a loss or a stray delivery turns the "+
		"row into an error. CPU per intent while draining (database backends, read just before the workers stop; the "+
		"workers' own from their rusage, start-up included): configured %s; discovered %s. Three workers spend most "+
		"of the span waiting for the budget: a lease that finds the bucket empty takes the next tokens due and the "+
		"worker sleeps until they are (issue 23: 5.5 ms of database CPU per intent when they polled the row). DB CPU/s "+
		"is the database's CPU over the drain's wall-clock time. The harness counts the outbox (a scan of every intent) only "+
		"once the fake has delivered every intent, or every 5 s, so its own polling is not in the figure. River + limiter "+
		"DB CPU/job is the same work without sendonce, measured once after both rows: %s River jobs on %d River clients "+
		"of MaxWorkers %d (each its own pool, FetchCooldown %s), whose worker waits for one in-memory limiter at %d/s "+
		"and calls the same client against the same fake: the database cost of River's fetch and completion alone, "+
		"what no outbox can go below. With `pg_stat_statements` loaded in the server, the progress output lists the "+
		"statements of each row with their calls per intent.",
		s.limit, Thousands(float64(s.n/s.limit)), Thousands(float64(s.n)), s.workers, s.concurrency,
		s.limit, s.limit, s.limit, s.limit, s.limit, cpu(s.cells[0]), cpu(s.cells[1]),
		Thousands(float64(s.n)), s.workers, s.concurrency, worker.DefaultFetchCooldown, s.limit)}
}

// Close removes the built binary.
func (s *RateLimited) Close() error {
	if s.tmpDir != "" {
		return os.RemoveAll(s.tmpDir)
	}
	return nil
}

// atMostWhenRead is f.AtMost(v), met also when f could not be read (the
// database's backends are not on this machine).
func atMostWhenRead(f *Figure, v float64) func(*Row) bool {
	return func(r *Row) bool { return f.Value.Len() == 0 || f.AtMost(v)(r) }
}
