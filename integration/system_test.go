package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/machine/pgcluster"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
	"github.com/sendonce/sendonce/outbox"
)

// Flags of the system test, each with an environment twin.
var (
	flagSystemSeeds  = flag.String("system.seeds", "", "system test seeds: a list (7,8,9) or a count (5x: five seeds from -seed, or from 1); env SENDONCE_SYSTEM_SEEDS; default 1,2")
	flagSystemBudget = flag.Duration("system.budget", 0, "system test soak: run seeds one after another from the first of -system.seeds until this much time is spent (e.g. 20m); env SENDONCE_SYSTEM_BUDGET")
	flagSystemOps    = flag.Duration("system.ops", 0, "how long each seed's schedule of operations runs (default 15s); env SENDONCE_SYSTEM_OPS")
)

// The clocks of the system test, shortened as in production's proportions:
// the API forgets an idempotency key (sysKeyWindow) before the outbox
// prunes a settled intent (sysRetain), as 24 h against 30 days; the
// workers' replay window stays inside the API's key memory.
const (
	sysKeyWindow    = 6 * time.Second
	sysReplayWindow = 5 * time.Second
	sysRetain       = 8 * time.Second
)

// TestSystem is the seeded, randomized whole-system test: for each seed it
// runs a random schedule of operations (enqueues by Go in every isolation
// level, by SQL and by the CLI, re-enqueues, key reuse, runs and their
// steering, schedules, cancels, retries, suppressions, prunes, each naming
// one of the seed's tenants or none, and the tenants' weights and limits
// changed as it goes: system_tenants_test.go) against 2–3 real
// workers of mixed flags, interleaved with faults (SIGKILLs, PostgreSQL
// restarts, lost answers, 5xx, 429s, 400/422 after an uncertain attempt,
// workers stopped past their leases, one of them while the rescue of its
// intents fails), quiesces, and holds the fake's ledger to a model of what
// each operation's answer proved (system_model_test.go).
func TestSystem(t *testing.T) {
	setup(t)
	seeds, budget, opsFor := systemSettings(t)
	cluster := pgtest.NewCluster(t, pgcluster.Options{Durable: true, Logf: func(string, ...any) {}})
	start := time.Now()
	var total struct{ seeds, ops, faults, violations int }
	for i := 0; i < 100_000; i++ {
		var seed uint64
		switch {
		case budget > 0 && time.Since(start) < budget:
			seed = seeds[0] + uint64(i)
		case budget == 0 && i < len(seeds):
			seed = seeds[i]
		}
		if seed == 0 {
			break
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			ops, faults, viol := runSystem(t, cluster, seed, opsFor)
			total.seeds++
			total.ops += ops
			total.faults += faults
			total.violations += viol
		})
	}
	summary(t, "system: total seeds=%d operations=%d faults=%d violations=%d elapsed=%s",
		total.seeds, total.ops, total.faults, total.violations, time.Since(start).Round(time.Second))
}

// systemSettings reads the flags and their environment twins.
func systemSettings(t *testing.T) (seeds []uint64, budget, ops time.Duration) {
	spec := *flagSystemSeeds
	if spec == "" {
		spec = os.Getenv("SENDONCE_SYSTEM_SEEDS")
	}
	if spec == "" {
		spec = "1,2"
	}
	if n, ok := strings.CutSuffix(spec, "x"); ok {
		count, err := strconv.Atoi(n)
		if err != nil || count < 1 {
			t.Fatalf("-system.seeds %q: want a list of seeds or a count such as 5x", spec)
		}
		first := *flagSeed
		if first == 0 {
			first = 1
		}
		for i := range count {
			seeds = append(seeds, first+uint64(i))
		}
	} else {
		for _, f := range strings.Split(spec, ",") {
			s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil || s == 0 {
				t.Fatalf("-system.seeds %q: %q is not a seed (a positive number)", spec, f)
			}
			seeds = append(seeds, s)
		}
	}
	budget = *flagSystemBudget
	if v := os.Getenv("SENDONCE_SYSTEM_BUDGET"); v != "" && budget == 0 {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SENDONCE_SYSTEM_BUDGET=%q: %v", v, err)
		}
		budget = d
	}
	ops = *flagSystemOps
	if v := os.Getenv("SENDONCE_SYSTEM_OPS"); v != "" && ops == 0 {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SENDONCE_SYSTEM_OPS=%q: %v", v, err)
		}
		ops = d
	}
	if ops == 0 {
		ops = 15 * time.Second
	}
	return seeds, budget, ops
}

// sysWorker is one `sendonce work` process of the system test and how to
// start it again.
type sysWorker struct {
	name     string
	args     []string
	hookAddr string
	coalesce bool
	conc     int // --concurrency
	// pausedUntil is when a worker stopped by opPause is continued
	// (zero: not paused).
	pausedUntil time.Time
	p           *proc
	restartAt   time.Time
	restarts    int
	desc        string
	all         []*proc // every process it ran, for the logs
}

// sysRunner runs one seed.
type sysRunner struct {
	t       *testing.T
	seed    uint64
	start   time.Time
	rng     *rand.Rand
	pool    *pgxpool.Pool
	ob      *outbox.Outbox
	m       *model
	srv     *fakeapi.Server
	e       env
	cluster *pgcluster.Cluster
	workers []*sysWorker
	hooks   *hookProxy

	specs    map[string]*sysSpec
	keys     []string // intent keys made, in order (run members excluded from re-enqueues)
	runKeys  []string
	n, nRuns int
	nEvents  int // events the schedule made up (and delivery headers of replays)
	episodes []*sysEpisode
	dbFault  float64 // sys_fault's claim_commit_fail as last set
	seq      int

	unrescued *sysUnrescued // the seed's fault pause-unrescued
	ten       *sysTenants   // the seed's tenants (system_tenants_test.go)
	// dbFaultOn is when the claim-commit fault was last put on (zero:
	// off), for rule 16.
	dbFaultOn time.Time
}

func (r *sysRunner) begin(kind, detail string) *sysOp {
	r.seq++
	op := &sysOp{Seq: r.seq, Kind: kind, Start: time.Now(), Detail: detail}
	r.m.ops = append(r.m.ops, op)
	return op
}

func (r *sysRunner) end(op *sysOp, o sysOutcome, err error) {
	op.End = time.Now()
	op.Result = o.String()
	if err != nil {
		op.Result += ": " + oneLine(err.Error())
	}
	if testing.Verbose() {
		r.t.Log(op)
	}
}

// note adds what an operation found after its answer to its log.
func (r *sysRunner) note(op *sysOp, text string) {
	op.Detail += " (" + text + ")"
	if testing.Verbose() {
		r.t.Logf("#%d note: %s", op.Seq, text)
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// runSystem runs one seed: its own database, fake and workers; the
// schedule; quiescence; the check. It returns the operations, faults and
// violations counted.
func runSystem(t *testing.T, cluster *pgcluster.Cluster, seed uint64, opsFor time.Duration) (int, int, int) {
	start := time.Now()
	rng := rand.New(rand.NewPCG(seed, 0x5e4d0ce))
	r := &sysRunner{t: t, seed: seed, start: start, rng: rng, cluster: cluster, m: newModel(seed), specs: map[string]*sysSpec{},
		ten: newSysTenants(seed)}

	// The webhook proxy listens first, so the fake has its URL.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.hooks = newHookProxy()
	r.hooks.srv = &http.Server{Handler: r.hooks, ReadHeaderTimeout: 5 * time.Second}
	go r.hooks.srv.Serve(ln)
	t.Cleanup(func() { r.hooks.srv.Close() })

	r.srv = fakeapi.NewTest(t, fakeapi.Config{
		APIKeys:       []string{apiKey},
		Seed:          int64(rng.Uint64()>>2) + 1,
		KeyWindow:     sysKeyWindow,
		WebhookURL:    "http://" + ln.Addr().String() + "/webhooks/openemail",
		WebhookSecret: webhookSecret,
	})
	dbURL, pool := newDatabase(t, cluster.URL, fmt.Sprintf("system_%d", seed))
	r.pool = pool
	installClaimLog(t, pool)
	installStatusLog(t, pool)
	r.e = processEnv(dbURL, r.srv)
	r.e.Extra = append(r.e.Extra, "OPENEMAIL_WEBHOOK_SECRET="+webhookSecret)
	if r.ob, err = outbox.New(pool, nil); err != nil {
		t.Fatal(err)
	}

	// 2–3 workers of mixed flags; in two seeds of three, all of them
	// count a daily quota too, one too large to bind (rule 11).
	nw := 2 + rng.IntN(2)
	quota := rng.IntN(3) != 0
	for i := range nw {
		o := workerOptions{Concurrency: 10, MaxAttempts: 50, RateLimitWait: time.Second}
		var desc []string
		if quota {
			o.APIRate = sysQuota
			desc = append(desc, "api-rate="+sysQuota)
		}
		if rng.IntN(2) == 0 {
			o.Coalesce, o.Concurrency = 20, 30
			desc = append(desc, "coalesce=20")
		}
		if rng.IntN(3) == 0 {
			o.PollOnly = true
			desc = append(desc, "poll-only")
		}
		w := &sysWorker{name: fmt.Sprintf("worker%d", i), hookAddr: freeLoopbackAddr(t), coalesce: o.Coalesce > 0, conc: o.Concurrency}
		w.args = append(workerArgs(t, o), "--replay-window", sysReplayWindow.String(), "--webhook-addr", w.hookAddr)
		if rng.IntN(3) == 0 {
			w.args = append(w.args, "--retain", sysRetain.String())
			desc = append(desc, "retain="+sysRetain.String())
		}
		if rng.IntN(4) == 0 {
			w.args = append(w.args, "--partly-suppressed", "park")
			desc = append(desc, "partly-suppressed=park")
		}
		w.desc = w.name + "(" + strings.Join(desc, ",") + ")"
		r.hooks.mu.Lock()
		r.hooks.addrs = append(r.hooks.addrs, w.hookAddr)
		r.hooks.mu.Unlock()
		w.p = startProc(t, w.name, r.e, w.args...)
		w.all = append(w.all, w.p)
		r.hooks.set(w.hookAddr, true)
		r.workers = append(r.workers, w)
	}
	var descs []string
	for _, w := range r.workers {
		descs = append(descs, w.desc)
		r.m.ten.claimBudget += w.conc + sysAheadMax + 1
	}
	tenants := make([]string, len(r.ten.names))
	for i, n := range r.ten.names {
		tenants[i] = strconv.Quote(n)
	}
	t.Logf("system: seed=%d workers %s; tenants %s; operations for %s", seed, strings.Join(descs, " "), strings.Join(tenants, ","), opsFor)

	// The schedule.
	r.unrescued = newUnrescued(seed, time.Now(), opsFor)
	r.m.ten.race = r.ten.newRace(time.Now(), opsFor)
	tick := time.NewTicker(40 * time.Millisecond) // pacing of the schedule, not a synchronisation
	defer tick.Stop()
	deadline := time.Now().Add(opsFor)
	var lastSnap time.Time
	for steps := 0; time.Now().Before(deadline) && steps < 100_000; steps++ {
		<-tick.C
		r.expireFaults(time.Now())
		r.syncDBFault()
		r.continuePaused(false)
		r.restartDead(false)
		r.stepUnrescued(time.Now())
		r.stepRace(time.Now())
		if time.Since(lastSnap) > time.Second {
			// Workers prune too (--retain): keep what each row said last.
			r.snapshot()
			lastSnap = time.Now()
		}
		r.step()
	}

	r.quiesce()
	r.m.setPosts(r.hooks.all())
	r.awaitStatuses()
	final := r.readFinal()
	r.m.check(final)
	if quota {
		r.checkQuota(final)
	}
	for _, n := range r.m.ten.notes {
		t.Logf("system: seed=%d %s", seed, n)
	}

	ops, faults := r.m.opCounts()
	nops, nfaults := 0, 0
	for _, n := range ops {
		nops += n
	}
	for _, n := range faults {
		nfaults += n
	}
	for i, v := range r.m.violations {
		if i == 30 {
			t.Errorf("system: seed=%d … and %d more violations", seed, len(r.m.violations)-30)
			break
		}
		t.Error(r.m.explain(v))
	}
	if len(r.m.violations) > 0 {
		r.keepLogs()
	}
	states := map[string]int{}
	for _, row := range final.rows {
		states[row.State]++
	}
	summary(t, "system: seed=%d workers=%s tenants=%d ops={%s} faults={%s} intents=%d states={%s} held=%d deliveries=%d requests=%d events=%d violations=%d elapsed=%s",
		seed, strings.Join(descs, ","), len(r.ten.names), fmtCounts(ops), fmtCounts(faults), len(r.m.intents), fmtCounts(states), len(final.held),
		len(final.deliveries), len(final.requests), len(r.m.events), len(r.m.violations), time.Since(start).Round(time.Second))
	for _, w := range r.workers {
		if w.p.running() {
			w.p.terminate(20 * time.Second)
		}
	}
	return nops, nfaults, len(r.m.violations)
}

// keepLogs writes a failing seed's whole schedule and every worker
// process's output to a directory under the system's temporary directory,
// and names it.
func (r *sysRunner) keepLogs() {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sendonce-system-%d", r.seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Log(err)
		return
	}
	var b strings.Builder
	for _, op := range r.m.ops {
		b.WriteString(op.String() + "\n")
	}
	os.WriteFile(filepath.Join(dir, "schedule.txt"), []byte(b.String()), 0o644)
	for _, w := range r.workers {
		for i, p := range w.all {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.%d.log", w.name, i)), []byte(p.stdout.String()+p.stderr.String()), 0o644)
		}
	}
	r.t.Logf("system: seed=%d: the schedule and the workers' logs are in %s", r.seed, dir)
}

// step runs one drawn operation or fault.
func (r *sysRunner) step() {
	type choice struct {
		w  int
		fn func()
	}
	newSpecs := func() ([]*sysSpec, []int) {
		n := 1 + r.rng.IntN(3)
		var s []*sysSpec
		var v []int
		for range n {
			s = append(s, r.newSpec(""))
			v = append(v, 1)
		}
		return s, v
	}
	choices := []choice{
		{20, func() { s, v := newSpecs(); r.opEnqueueGo(s, v, "enqueue-go") }},
		{5, func() { s, v := newSpecs(); r.opEnqueueSQL(s, v, "") }},
		{3, func() { r.opEnqueueCLI(r.newSpec(""), 1) }},
		{8, func() { r.opReenqueue(false) }},
		{2, func() { r.opReenqueue(true) }},
		{5, r.opCancel},
		{2, r.opRetry},
		// As an application on a release before the drain enqueues (a
		// rolling upgrade), and as a database upgraded from one holds
		// them: intents with River jobs of their own, sent by the
		// machinery that works such jobs under the same rules; opRiverJob
		// deletes or discards their jobs.
		{3, func() {
			s, v := newSpecs()
			for _, x := range s {
				x.Tenant = "" // an older release's: no tenant
			}
			r.opEnqueueGo(s, v, "enqueue-go-jobs")
		}},
		{2, r.opRiverJob},
		{3, func() { r.opSuppression(true) }},
		{2, func() { r.opSuppression(false) }},
		{2, func() { r.opTopicUnsubscribe(true) }},
		{1, func() { r.opTopicUnsubscribe(false) }},
		{2, r.opPrune},
		{2, r.opPruneRace},
		{3, r.opRunCreate},
		{2, func() {
			if len(r.runKeys) > 0 {
				r.opRunAdd(r.runKeys[r.rng.IntN(len(r.runKeys))], 1+r.rng.IntN(2))
			}
		}},
		{1, func() { r.opRunOp("pause") }},
		{1, func() { r.opRunOp("resume") }},
		{2, func() { r.opRunOp("cancel") }},
		{1, func() { r.opRunOp("reschedule") }},
		{2, r.opBounce},
		{3, func() { r.opSuppressionEvent(true) }},
		{1, func() { r.opSuppressionEvent(false) }},
		{2, r.opReplay},
		{2, r.opOutOfOrder},
		{2, r.opSuppressFrozen},
		{2, r.opCancelAtFreeze},
		{1, r.opKill},
		{1, func() {
			if r.rng.IntN(2) == 0 {
				r.opPause()
			}
		}},
		{1, func() {
			if r.rng.IntN(3) == 0 {
				r.opPGRestart()
			}
		}},
		{2, func() {
			if len(r.episodes) == 0 {
				r.opFaultEpisode()
			}
		}},
		{3, r.opTenantSet},
		{1, r.opSchedule},
	}
	sum := 0
	for _, c := range choices {
		sum += c.w
	}
	x := r.rng.IntN(sum)
	for _, c := range choices {
		if x < c.w {
			c.fn()
			return
		}
		x -= c.w
	}
}

// quiesce removes the schedules, cancels what is left of the race, lifts
// the faults and the tenants' rates, starts every worker, resumes paused
// runs, and waits (polling the outbox, with a deadline) until no intent is
// pending or sending but those their tenant's daily quota holds.
func (r *sysRunner) quiesce() {
	r.settleUnrescued()
	r.endSchedules()
	op := r.begin("quiesce", "lift faults and rates, restart workers, resume paused runs")
	r.episodes = nil
	r.endRace()
	_ = r.applyFaults()
	for end := time.Now().Add(time.Minute); r.dbFault != 0 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		r.syncDBFault()
	}
	r.continuePaused(true)
	r.restartDead(true)
	r.liftRates()
	ctx := context.Background()
	for _, key := range r.runKeys {
		st, err := r.ob.RunStatus(ctx, key)
		if err == nil && st.State == outbox.RunPaused {
			rop := r.begin("run-resume", key+" (quiesce)")
			rop.Keys = []string{key}
			_, err := r.ob.ResumeRun(ctx, key)
			o := goOutcome(err)
			r.end(rop, o, err)
			r.m.runOps[key] = append(r.m.runOps[key], sysRunOp{Kind: "resume", Start: rop.Start, End: rop.End, Result: o, Seq: rop.Seq})
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	state, slow := "", ""
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		// What a quota holds stays pending (rule 14).
		c, err := countBy(qctx, r.pool, `SELECT state, count(*) FROM sendonce_outbox o WHERE state IN ('pending', 'sending') AND NOT `+heldSQL+` GROUP BY 1`)
		cancel()
		state = fmt.Sprint(c, err)
		if err == nil && c.total() == 0 {
			break
		}
		if time.Now().After(deadline) {
			break // what is left is reported by the check as stranded
		}
		if slow == "" && time.Since(op.Start) > 5*time.Second {
			// What a long drain waits for, for the log.
			qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			keys, _ := queryStrings(qctx, r.pool, `SELECT idempotency_key || ' ' || state || ' attempts=' || attempts || ' ' || coalesce(last_error, '')
				FROM sendonce_outbox o WHERE state IN ('pending', 'sending') AND NOT `+heldSQL+` ORDER BY id LIMIT 3`)
			cancel()
			slow = strings.Join(keys, "; ")
			r.note(op, "after 5 s still waiting for "+oneLine(slow))
		}
		time.Sleep(200 * time.Millisecond)
	}
	drained := time.Now()
	// The webhook events of what was delivered, to the end.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	emails := 0
	for _, d := range r.srv.Deliveries() {
		if d.Kind != fakeapi.KindBroadcast {
			emails++ // broadcasts make no events
		}
	}
	werr := r.srv.WaitWebhooks(wctx, emails)
	cancel()
	r.end(op, outYes, nil)
	r.note(op, fmt.Sprintf("outbox drained in %s (left: %s); %d of %d webhook events sent in %s more (%v)",
		drained.Sub(op.Start).Round(time.Millisecond), state, r.srv.WebhooksSent(), emails, time.Since(drained).Round(time.Millisecond), werr))
}

// awaitStatuses waits (polling the outbox, with a deadline) until every
// sent intent's delivery status is what its messages' events say: an event
// that came before its send was recorded is matched by a worker's sweeper
// within a second. What still differs at the deadline is reported by the
// check.
func (r *sysRunner) awaitStatuses() {
	op := r.begin("await-statuses", "until each sent intent's delivery status is its events'")
	deadline := time.Now().Add(10 * time.Second)
	left := -1
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rows, err := readRows(ctx, r.pool)
		cancel()
		if err == nil {
			left = 0
			for _, row := range rows {
				if want, ok := r.m.statusWanted(row); ok && !slices.Contains(want, row.Delivery) {
					left++
				}
			}
			if left == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
	r.end(op, outYes, nil)
	op.Result += fmt.Sprintf(" differing=%d", left)
}

// snapshot keeps what the outbox says of every row now: a row pruned
// later is checked by its last known state.
func (r *sysRunner) snapshot() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := readRows(ctx, r.pool)
	if err != nil {
		return // the database is away (a restart): the next one will do
	}
	for k, row := range rows {
		r.m.snap[k] = row
	}
	r.learnScheduled(rows)
	if b, err := readBatches(ctx, r.pool); err == nil {
		for k, v := range b {
			r.m.batchSnap[k] = v
		}
	}
}

// readFinal reads what the checker needs after quiescence.
func (r *sysRunner) readFinal() sysFinal {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var f sysFinal
	var err error
	if f.rows, err = readRows(ctx, r.pool); err != nil {
		r.t.Fatal(err)
	}
	r.learnScheduled(f.rows)
	if f.held, err = readHeld(ctx, r.pool); err != nil {
		r.t.Fatal(err)
	}
	f.from, f.to = r.start, time.Now()
	if f.batches, err = readBatches(ctx, r.pool); err != nil {
		r.t.Fatal(err)
	}
	for k, b := range r.m.batchSnap {
		if _, ok := f.batches[k]; !ok {
			f.batches[k] = b // pruned since
		}
	}
	// A row pruned since its last snapshot: its tombstone's final state.
	for key := range r.m.intents {
		if _, ok := f.rows[key]; ok {
			continue
		}
		var state string
		err := r.pool.QueryRow(ctx, `SELECT state FROM sendonce_tombstone WHERE key_hash = sendonce_key_hash($1)`, key).Scan(&state)
		if err == nil {
			row := r.m.snap[key]
			row.Key, row.State, row.Pruned = key, state, true
			f.rows[key] = row
		}
	}
	for after := ""; ; {
		list, err := r.ob.Suppressions(ctx, &outbox.SuppressionParams{After: after, Limit: 10_000})
		if err != nil {
			r.t.Fatal(err)
		}
		for _, s := range list {
			f.suppressed = append(f.suppressed, s.Address)
		}
		if len(list) < 10_000 {
			break
		}
		after = list[len(list)-1].Address
	}
	if f.claimLog, f.claims, err = readClaims(ctx, r.pool); err != nil {
		r.t.Fatal(err)
	}
	if f.fenced, err = readFenced(ctx, r.pool); err != nil {
		r.t.Fatal(err)
	}
	if f.statusLog, err = readStatusLog(ctx, r.pool); err != nil {
		r.t.Fatal(err)
	}
	r.t.Logf("system: seed=%d the application's status log: %s", r.seed, statusLogCounts(f.statusLog))
	var ended, lapsed int
	if err := r.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM sys_lease_end),
		(SELECT count(*) FROM sendonce_worker WHERE end_reason = 'lapsed')`).Scan(&ended, &lapsed); err == nil {
		r.t.Logf("system: seed=%d leases: %d ended (%d lapsed); %d claims and records under an ended lease", r.seed, ended, lapsed, len(f.fenced))
	}
	if err = r.pool.QueryRow(ctx, `SELECT coalesce(sum(used), -1), coalesce(min(period_start) <= $1, true)
		FROM sendonce_rate_quota WHERE period = 'd'`, r.start).Scan(&f.quotaUsed, &f.quotaSameDay); err != nil {
		r.t.Fatal(err)
	}
	f.deliveries = r.srv.Deliveries()
	f.requests = r.srv.Requests()
	f.jobs = map[int64]string{}
	rows, err := r.pool.Query(ctx, `SELECT id, state::text FROM river_job`)
	if err != nil {
		r.t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var s string
		if err := rows.Scan(&id, &s); err != nil {
			r.t.Fatal(err)
		}
		f.jobs[id] = s
	}
	rows.Close()
	st, err := r.ob.Stats(ctx)
	if err != nil {
		r.t.Fatalf("stats: %v", err)
	}
	f.stats, f.statsRows = map[string]int64{}, map[string]int64{}
	for s, n := range st.Counts {
		f.stats[string(s)] = n
		f.statsRows[string(s)] = 0
	}
	for d, n := range st.Deliveries {
		f.stats["delivery "+string(d)] = n
		f.statsRows["delivery "+string(d)] = 0
	}
	for _, q := range []string{`SELECT state, count(*) FROM sendonce_outbox GROUP BY 1`,
		`SELECT 'delivery ' || delivery_status, count(*) FROM sendonce_outbox WHERE delivery_status IS NOT NULL GROUP BY 1`} {
		c, err := countBy(ctx, r.pool, q)
		if err != nil {
			r.t.Fatal(err)
		}
		for k, n := range c {
			f.statsRows[k] = int64(n)
		}
	}
	scopeTrips, err := r.ob.Breakers(ctx, "", "")
	if err != nil {
		r.t.Fatal(err)
	}
	tenantTrip := map[string]time.Time{}
	for _, b := range scopeTrips {
		switch {
		case b.TrippedAt == nil:
		case b.Scope == outbox.BreakerTenant:
			tenantTrip[b.Name] = *b.TrippedAt
		case f.topicTrip.IsZero() || b.TrippedAt.Before(f.topicTrip):
			f.topicTrip = *b.TrippedAt
		}
	}
	f.runTrips = map[string]time.Time{}
	f.runCounts, f.runRows = map[string]map[string]int64{}, map[string]map[string]int64{}
	for _, key := range r.m.runs {
		st, err := r.ob.RunStatus(ctx, key)
		if errors.Is(err, outbox.ErrNotFound) {
			continue // never committed, or pruned
		}
		if err != nil {
			r.t.Fatalf("run status %s: %v", key, err)
		}
		if t, ok := tenantTrip[st.Tenant]; ok {
			f.runTrips[key] = t
		}
		if b := st.Breaker; b != nil && b.TrippedAt != nil && (f.runTrips[key].IsZero() || b.TrippedAt.Before(f.runTrips[key])) {
			f.runTrips[key] = *b.TrippedAt
		}
		f.runCounts[key] = map[string]int64{}
		for s, n := range st.Counts {
			f.runCounts[key][string(s)] = n
		}
		c, err := countBy(ctx, r.pool, fmt.Sprintf(`SELECT state, count(*) FROM sendonce_outbox WHERE run_key = '%s' GROUP BY 1`, key))
		if err != nil {
			r.t.Fatal(err)
		}
		f.runRows[key] = map[string]int64{}
		for s, n := range c {
			f.runRows[key][s] = int64(n)
		}
	}
	return f
}
