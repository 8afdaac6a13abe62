package integration

import (
	"context"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/outbox"
)

// The system test's model: what each operation's returned result proved
// (committed, rolled back, refused, canceled, suppressed, ...), and the
// checker that holds the fake's ledger and the database's final rows to it.
// The model believes only answers: an operation whose outcome is unknown
// (its connection died under it) is marked uncertain, and only then is the
// database's own final answer taken as the truth.

// sysOp is one operation or fault of a schedule, as logged.
type sysOp struct {
	Seq        int
	Kind       string
	Start, End time.Time
	Keys       []string // intent and run keys it touched
	Addrs      []string // canonical addresses it touched
	Detail     string
	Result     string
}

func (o *sysOp) String() string {
	return fmt.Sprintf("#%d %s [%s..%s] %s => %s", o.Seq, o.Kind, o.Start.Format("15:04:05.000"), o.End.Format("15:04:05.000"), o.Detail, o.Result)
}

// sysOutcome is what an operation as its answer proved it.
type sysOutcome int

const (
	outNo        sysOutcome = iota // certainly did not happen (rolled back, refused, error before commit)
	outYes                         // certainly happened (it returned success)
	outUncertain                   // unknown: the connection broke during the commit
)

func (o sysOutcome) String() string {
	return [...]string{"no", "yes", "uncertain"}[o]
}

// sysUnit is one email (or broadcast) of an intent: the cause its subject
// names ("key" or, for a batch intent's i-th email, "key#i") and the
// canonical recipients it must reach.
type sysUnit struct {
	Cause      string
	Recipients []string
}

// sysIntent is the model of one idempotency key.
type sysIntent struct {
	Key     string
	Kind    outbox.Kind
	Run     string
	Units   []sysUnit
	Forms   []string // the recipients as written
	Variant int      // the body variant first committed (0: none yet)

	Committed   sysOutcome // the best answer any enqueue of it gave
	CommittedAt time.Time
	Refused     []string // refusals by enqueues (clear errors)
	// Canceled is what a Cancel of the key answered (outYes: it returned
	// the canceled record; outUncertain: its connection died).
	Canceled   sysOutcome
	CanceledAt time.Time
	// RetriedAt are the times retries of it were answered (it was failed
	// or suppressed then, so no cancel of its run had canceled it).
	RetriedAt []time.Time
	// EnqueueStart is when the enqueue that committed it began.
	EnqueueStart time.Time
	// RunSince is when its run (under the key Run) began: the start of
	// the enqueue that answered it created the run.
	RunSince time.Time
	// Tenants are the tenants its row may name: that of each enqueue
	// that may have inserted it (rule 13; sysTenantUnknown: any).
	Tenants []string
	// Jobs says it may have a River job of its own (enqueue-go-jobs):
	// sent by a machinery that applies no tenant's limits.
	Jobs bool
}

// runOpsOf is what was done to in's run since in's run began: a done run
// is pruned with its members, and its key may then begin a new run, which
// none of the old one's operations touched.
func (m *model) runOpsOf(in *sysIntent) []sysRunOp {
	var out []sysRunOp
	for _, op := range m.runOps[in.Run] {
		if !op.End.Before(in.RunSince) {
			out = append(out, op)
		}
	}
	return out
}

// sysAddrOp is a suppression change of one canonical address.
type sysAddrOp struct {
	Add        bool
	Start, End time.Time
	Result     sysOutcome
	Seq        int
}

// sysRunOp is a run-level operation's answer.
type sysRunOp struct {
	Kind       string // cancel, pause, resume, reschedule
	Start, End time.Time
	Result     sysOutcome
	Canceled   int64 // CancelRun's count
	Seq        int
}

// model is everything the schedule proved.
type model struct {
	seed    uint64
	ops     []*sysOp
	intents map[string]*sysIntent
	order   []string // intent keys in first-use order
	addrOps map[string][]sysAddrOp
	runOps  map[string][]sysRunOp
	// runSince is, per run key, the start of the last enqueue that
	// answered it created the run (a run pruned when done leaves its key
	// free for a new one).
	runSince map[string]time.Time
	runs     []string
	// snapshots of sendonce_outbox taken before each prune: a pruned row's
	// last known state.
	snap      map[string]sysRow
	batchSnap map[string]sysBatch
	// the webhook events (system_events_test.go): every post to a worker,
	// the events by id and by message, and each address's changes.
	posts      []*hookPost
	events     map[string]*sysEvent
	eventOrder []string
	byEmail    map[string][]*sysEvent
	changes    map[string][]sysChange
	requests   []fakeapi.RequestRecord // the fake's request log, for explanations
	claimLog   []sysClaim              // the claim log, for explanations
	batches    map[string]sysBatch
	violations []sysViolation
	ten        sysTenantModel // tenants (system_tenants_test.go)
}

func newModel(seed uint64) *model {
	return &model{seed: seed, intents: map[string]*sysIntent{}, addrOps: map[string][]sysAddrOp{},
		runOps: map[string][]sysRunOp{}, runSince: map[string]time.Time{}, snap: map[string]sysRow{}, batchSnap: map[string]sysBatch{},
		ten: sysTenantModel{runTenant: map[string]*sysRunTenant{}, settings: map[string][]*sysSetting{}}}
}

// sysViolation is a broken rule and what it involves.
type sysViolation struct {
	Rule  string
	Text  string
	Keys  []string
	Addrs []string
}

func (m *model) violate(rule string, keys, addrs []string, format string, args ...any) {
	m.violations = append(m.violations, sysViolation{Rule: rule, Text: fmt.Sprintf(format, args...), Keys: keys, Addrs: addrs})
}

func (m *model) intent(key string) *sysIntent {
	in := m.intents[key]
	if in == nil {
		in = &sysIntent{Key: key}
		m.intents[key] = in
		m.order = append(m.order, key)
	}
	return in
}

// canonical is the address an email written as a reaches: what the API
// (the fake, by net/mail) delivers to, in lower case.
func canonical(a string) string {
	if p, err := mail.ParseAddress(a); err == nil {
		return strings.ToLower(p.Address)
	}
	return strings.ToLower(strings.TrimSpace(a))
}

// sysRow is what the checker reads of an outbox row.
type sysRow struct {
	Key, State, Kind, RunKey, BatchKey, LastError, Delivery, MessageID string
	Tenant                                                             string // "" for the default tenant
	Attempts                                                           int
	Uncertain                                                          bool
	FirstAttempt                                                       *time.Time
	JobID                                                              *int64
	SendAt                                                             *time.Time
	Pruned                                                             bool // read from its tombstone (and last snapshot)
}

func readRows(ctx context.Context, pool *pgxpool.Pool) (map[string]sysRow, error) {
	rows, err := pool.Query(ctx, `SELECT idempotency_key, state, kind, coalesce(run_key, ''), coalesce(batch_key, ''),
		coalesce(last_error, ''), coalesce(delivery_status, ''), coalesce(message_id, ''), attempts, uncertain, first_attempt_at, job_id, send_at,
		coalesce(tenant, '')
		FROM sendonce_outbox`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]sysRow{}
	for rows.Next() {
		var r sysRow
		if err := rows.Scan(&r.Key, &r.State, &r.Kind, &r.RunKey, &r.BatchKey, &r.LastError, &r.Delivery, &r.MessageID, &r.Attempts,
			&r.Uncertain, &r.FirstAttempt, &r.JobID, &r.SendAt, &r.Tenant); err != nil {
			return nil, err
		}
		out[r.Key] = r
	}
	return out, rows.Err()
}

// sysBatch is a frozen batch of sendonce_batch.
type sysBatch struct {
	Key, State string
	Members    []string
	Created    time.Time // when it was frozen (its transaction's start)
}

func readBatches(ctx context.Context, pool *pgxpool.Pool) (map[string]sysBatch, error) {
	rows, err := pool.Query(ctx, `SELECT idempotency_key, state, member_keys, created_at FROM sendonce_batch`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]sysBatch{}
	for rows.Next() {
		var b sysBatch
		if err := rows.Scan(&b.Key, &b.State, &b.Members, &b.Created); err != nil {
			return nil, err
		}
		out[b.Key] = b
	}
	return out, rows.Err()
}

// sysFinal is the state the checker reads after quiescence.
type sysFinal struct {
	rows       map[string]sysRow
	batches    map[string]sysBatch
	deliveries []fakeapi.Delivery
	requests   []fakeapi.RequestRecord
	runCounts  map[string]map[string]int64 // run key → RunStatus counts
	runRows    map[string]map[string]int64 // run key → members' states counted from rows
	stats      map[string]int64            // Stats (the tally): state or delivery status → count
	statsRows  map[string]int64            // the same counted from rows
	jobs       map[int64]string            // river job id → state
	suppressed []string                    // the suppression list (ob.Suppressions)
	claims     map[string][]time.Time      // each key's committed claims (sys_claim_log)
	claimLog   []sysClaim                  // the claim log, in order
	// quotaUsed is the fleet's count of its daily quota (-1: none), and
	// quotaSameDay says its period began before the seed did.
	quotaUsed    int64
	quotaSameDay bool
	fenced       []sysFenced // claims and records under an ended lease (rule 12)
	// held are the intents held by their tenant's daily quota (rule 14).
	held map[string]bool
	// statusLog is the application's table of transitions (rule 17).
	statusLog []sysStatusEntry
	// runTrips are when a breaker last paused each run: its own
	// (RunStatus.Breaker.TrippedAt), or its tenant's; topicTrip is the
	// earliest trip of any topic's breaker (zero: none). A run a breaker
	// paused is not due from then (rule 16).
	runTrips  map[string]time.Time
	topicTrip time.Time
	// from and to are when the seed's schedule began and when the
	// checker read the final state.
	from, to time.Time
}

// causeOf is the cause a delivery was made for: the key (and email index)
// its subject names, or for a template send (whose subject the template
// gives) its idempotency key; and the body variant.
func causeOf(d fakeapi.Delivery) (cause string, variant string) {
	if f := strings.Fields(d.Subject); len(f) == 3 && f[0] == "sys" {
		return f[1], f[2]
	}
	return d.IdempotencyKey, ""
}

// keyOfCause is the intent key of a cause ("k#1" → "k").
func keyOfCause(c string) string {
	if i := strings.LastIndexByte(c, '#'); i >= 0 {
		return c[:i]
	}
	return c
}

// check holds the final state to the model and records violations.
func (m *model) check(f sysFinal) {
	m.requests, m.batches, m.claimLog = f.requests, f.batches, f.claimLog
	// Deliveries by (cause, canonical recipient).
	type pair struct{ cause, rcpt string }
	got := map[pair][]fakeapi.Delivery{}
	for _, d := range f.deliveries {
		cause, variant := causeOf(d)
		key := keyOfCause(cause)
		in := m.intents[key]
		addrs := append(append(append([]string{}, d.To...), d.Cc...), d.Bcc...)
		if in == nil {
			m.violate("1", []string{d.IdempotencyKey}, nil, "delivery %s to %v under key %q (subject %q) belongs to no intent the schedule made",
				d.MessageID, addrs, d.IdempotencyKey, d.Subject)
			continue
		}
		if want := fmt.Sprintf("v%d", in.Variant); variant != "" && in.Variant != 0 && variant != want {
			m.violate("3", []string{key}, nil, "%s delivered with body %s, but the body committed under its key is %s (delivery %s, key %q)",
				cause, variant, want, d.MessageID, d.IdempotencyKey)
		}
		// The key it went under: the intent's own, or a batch holding it.
		if d.IdempotencyKey != key {
			b, ok := f.batches[d.IdempotencyKey]
			if !ok || !slices.Contains(b.Members, key) {
				m.violate("1", []string{key, d.IdempotencyKey}, nil, "%s delivered under key %q, which is neither its own nor a batch holding it", cause, d.IdempotencyKey)
			}
		}
		for _, a := range addrs {
			r := canonical(a)
			if in.Kind == outbox.KindBroadcast {
				r = a
			}
			got[pair{cause, r}] = append(got[pair{cause, r}], d)
		}
	}
	// Rule 1: nothing delivered twice.
	for p, ds := range got {
		if len(ds) > 1 {
			var what []string
			for _, d := range ds {
				what = append(what, fmt.Sprintf("%s under %q at %s", d.MessageID, d.IdempotencyKey, d.DeliveredAt.Format("15:04:05.000")))
			}
			m.violate("1", []string{keyOfCause(p.cause)}, []string{p.rcpt}, "%s delivered to %s %d times: %s", p.cause, p.rcpt, len(ds), strings.Join(what, ", "))
		}
	}

	faulted := map[string]bool{} // keys with a request some fault (or error) answered
	for _, r := range f.requests {
		if r.Fault != "" || r.Status >= 400 || r.Dropped {
			faulted[r.IdempotencyKey] = true
		}
	}

	for _, key := range m.order {
		in := m.intents[key]
		row, hasRow := f.rows[key]
		if !hasRow {
			row, hasRow = m.snap[key]
		}
		committed := in.Committed
		if committed == outUncertain {
			committed = outNo
			if hasRow {
				committed = outYes
			}
		}
		count := func(u sysUnit, r string) int { return len(got[pair{u.Cause, r}]) }
		total := 0
		for _, u := range in.Units {
			for _, r := range u.Recipients {
				total += count(u, r)
			}
		}
		if committed == outNo {
			if total > 0 {
				why := "never committed (rolled back, refused or failed)"
				if len(in.Refused) > 0 {
					why = "refused: " + in.Refused[0]
				}
				m.violate("3", []string{key}, in.allRecipients(), "%s was %s, yet delivered %d time(s)", key, why, total)
			}
			if hasRow && in.Committed == outNo {
				m.violate("3", []string{key}, nil, "%s: no enqueue committed it, yet the outbox holds it (%s)", key, row.State)
			}
			continue
		}
		if !hasRow {
			m.violate("2", []string{key}, nil, "%s was committed (%s) but the outbox has no row and no prune saw one", key, in.CommittedAt.Format("15:04:05.000"))
			continue
		}
		// Why it may, or must not, have been delivered.
		var mustNot string
		if in.Canceled == outYes {
			mustNot = fmt.Sprintf("canceled at %s", in.CanceledAt.Format("15:04:05.000"))
		}
		if in.Run != "" {
			for _, op := range m.runOpsOf(in) {
				// A member settled before the cancel (failed, suppressed) is
				// left as it is; a retry answered after it sends it again.
				revived := slices.ContainsFunc(in.RetriedAt, func(t time.Time) bool { return t.After(op.End) })
				if op.Kind == "cancel" && op.Result == outYes && !revived && (row.FirstAttempt == nil || row.FirstAttempt.After(op.End)) {
					mustNot = fmt.Sprintf("its run %s was canceled at %s (canceled=%d) before its first attempt (%s)", in.Run,
						op.End.Format("15:04:05.000"), op.Canceled, fmtTime(row.FirstAttempt))
				}
				if op.Kind == "pause" && op.Result == outYes && row.FirstAttempt != nil && row.FirstAttempt.After(op.End) {
					// The claim's statement ran at some instant between
					// first_attempt_at (its transaction's start: a claim
					// runs after the answers of its batcher round, in the
					// same transaction) and the first delivery, as the
					// suppression lookup below: a resume that began in that
					// interval may have come first (seed 327 of a soak: a
					// resume began 3 ms after first_attempt_at, and the
					// request went out 3 ms after it ended).
					var delivered time.Time // the first delivery after it
					for _, u := range in.Units {
						for _, r := range u.Recipients {
							for _, d := range got[pair{u.Cause, r}] {
								if d.DeliveredAt.After(*row.FirstAttempt) && (delivered.IsZero() || d.DeliveredAt.Before(delivered)) {
									delivered = d.DeliveredAt
								}
							}
						}
					}
					claimHi := *row.FirstAttempt
					if !delivered.IsZero() {
						claimHi = delivered
					}
					resumed := false
					for _, r := range m.runOpsOf(in) {
						if r.Kind != "pause" && r.Kind != "reschedule" && r.Start.After(op.Start) && r.Start.Before(claimHi) && r.Result != outNo {
							resumed = true
						}
					}
					if !resumed {
						m.violate("3", []string{key, in.Run}, nil, "%s first claimed at %s, while its run %s was paused (since %s)", key,
							fmtTime(row.FirstAttempt), in.Run, op.End.Format("15:04:05.000"))
					}
				}
			}
		}
		if in.Run != "" {
			// A canceled run takes no new member (hole 6).
			for _, op := range m.runOpsOf(in) {
				if op.Kind == "cancel" && op.Result == outYes && op.End.Before(in.EnqueueStart) {
					m.violate("3", []string{key, in.Run}, nil, "%s joined run %s by an enqueue begun at %s, after the run's cancel was answered (%s): a canceled run takes no new member",
						key, in.Run, in.EnqueueStart.Format("15:04:05.000"), op.End.Format("15:04:05.000"))
					break
				}
			}
		}
		canceledBy := in.Canceled != outNo
		for _, op := range m.runOpsOf(in) {
			if op.Kind == "cancel" && op.Result != outNo {
				canceledBy = true
			}
		}
		switch row.State {
		case "pending", "sending":
			if row.State == "pending" && f.held[key] {
				continue // held by its tenant's daily quota (rule 14)
			}
			m.violate("5", []string{key}, nil, "%s stranded in %s after quiescence (attempts %d, job %s, run %q, batch %q, last error %q)",
				key, row.State, row.Attempts, m.jobState(f, row.JobID), row.RunKey, row.BatchKey, row.LastError)
			continue
		case "canceled":
			if !canceledBy {
				m.violate("6", []string{key}, nil, "%s is canceled, but no cancel of it or its run answered", key)
			}
			if total > 0 {
				m.violate("6", []string{key}, in.allRecipients(), "%s is canceled, yet delivered %d time(s)", key, total)
			}
			continue
		case "suppressed":
			if total > 0 {
				m.violate("6", []string{key}, in.allRecipients(), "%s is suppressed, yet delivered %d time(s)", key, total)
			}
			any := false
			for _, r := range in.allRecipients() {
				if m.everSuppressed(r) {
					any = true
				}
			}
			if !any {
				m.violate("2", []string{key}, in.allRecipients(), "%s parked as suppressed, but none of its recipients %v was ever suppressed", key, in.allRecipients())
			}
			continue
		}
		if mustNot != "" && total > 0 {
			m.violate("3", []string{key, in.Run}, in.allRecipients(), "%s delivered %d time(s), but %s", key, total, mustNot)
			continue
		}
		if mustNot != "" {
			continue // a cancel answered before its first attempt; not delivered, whatever its state
		}
		switch row.State {
		case "failed":
			bk := row.BatchKey
			if !faulted[key] && !(bk != "" && faulted[bk]) && !strings.Contains(row.LastError, "replay window") && !anyBatchFaulted(f, key, faulted) {
				m.violate("2", []string{key}, nil, "%s failed though no request of it met a fault: %s", key, row.LastError)
			}
			for _, u := range in.Units {
				for _, r := range u.Recipients {
					if n := count(u, r); n > 0 && !row.Uncertain {
						m.violate("6", []string{key}, []string{r}, "%s is failed with a certain sysOutcome, yet %s was delivered to %s %d time(s) (last error %q)", key, u.Cause, r, n, row.LastError)
					}
				}
			}
		case "sent":
			// The first claim's lookup ran at some instant between the
			// claim's transaction start (first_attempt_at, now() of that
			// transaction) and the intent's first delivery: a lookup waits
			// for locks (a batch's first claim locks the batch, then its
			// run), so it may see a suppression that committed after
			// first_attempt_at, or miss one removed meanwhile (the claim
			// runs after the answers of its batcher round, in the same
			// transaction: seed 2 of a CI run had an address unsuppressed
			// 7 ms after first_attempt_at and before the lookup). Certain:
			// on the list throughout the interval; possible: at some
			// instant of it.
			lookupHi := time.Now()
			for _, u := range in.Units {
				for _, r := range u.Recipients {
					for _, d := range got[pair{u.Cause, r}] {
						if d.DeliveredAt.Before(lookupHi) {
							lookupHi = d.DeliveredAt
						}
					}
				}
			}
			for _, u := range in.Units {
				for _, r := range u.Recipients {
					n := count(u, r)
					var cert, poss bool
					if in.Kind != outbox.KindBroadcast && row.FirstAttempt != nil {
						cert = m.certainlySuppressedThroughout(r, *row.FirstAttempt, lookupHi)
						poss = m.possiblySuppressedDuring(r, *row.FirstAttempt, lookupHi)
					}
					switch {
					case cert && n > 0:
						m.violate("3", []string{key}, []string{r}, "%s (to %q) delivered to %s, who was on the suppression list from before the intent's first claim (%s) to its first delivery", u.Cause, in.Forms, r, fmtTime(row.FirstAttempt))
					case n == 0 && !poss:
						m.violate("6", []string{key}, []string{r}, "%s is sent, but %s was never delivered to %s", key, u.Cause, r)
					}
				}
			}
		default:
			m.violate("6", []string{key}, nil, "%s ended in state %q", key, row.State)
		}
	}

	m.checkList(f)
	m.checkOnce(f)
	m.checkStatuses(f)
	m.checkClaims(f)
	m.checkFenced(f)
	m.checkTenants(f)
	m.checkQuotas(f, f.from, f.to)
	m.checkRates(f, f.from, f.to)
	m.checkShares(f)
	m.checkStatusLog(f)

	// Rule 4: a run's counts are its members' states.
	for _, run := range m.runs {
		want := f.runRows[run]
		gotc := f.runCounts[run]
		for _, st := range outbox.States {
			if gotc[string(st)] != want[string(st)] {
				m.violate("4", []string{run}, nil, "run %s reports %s=%d, its members' rows say %d (reported %v, rows %v)", run, st, gotc[string(st)], want[string(st)], gotc, want)
				break
			}
		}
	}

	// Rule 4: the outbox's counts (the tally its triggers keep) are its
	// rows' states and delivery statuses.
	if fmt.Sprint(f.stats) != fmt.Sprint(f.statsRows) {
		m.violate("4", nil, nil, "Stats reports %v, the rows say %v", f.stats, f.statsRows)
	}
}

func anyBatchFaulted(f sysFinal, key string, faulted map[string]bool) bool {
	for _, b := range f.batches {
		if faulted[b.Key] && slices.Contains(b.Members, key) {
			return true
		}
	}
	return false
}

func (m *model) jobState(f sysFinal, id *int64) string {
	if id == nil {
		return "none"
	}
	if s, ok := f.jobs[*id]; ok {
		return fmt.Sprintf("%d %s", *id, s)
	}
	return fmt.Sprintf("%d gone", *id)
}

func (in *sysIntent) allRecipients() []string {
	var out []string
	for _, u := range in.Units {
		out = append(out, u.Recipients...)
	}
	return out
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Format("15:04:05.000")
}

// explain renders a violation with the operations that touched its keys or
// addresses.
func (m *model) explain(v sysViolation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "system: seed=%d VIOLATION rule %s: %s\n", m.seed, v.Rule, v.Text)
	touched := 0
	for _, op := range m.ops {
		// The operations on its keys, the suppression changes of its
		// addresses, and the faults.
		hit := strings.HasPrefix(op.Kind, "fault-")
		for _, k := range v.Keys {
			if k != "" && slices.Contains(op.Keys, k) {
				hit = true
			}
		}
		for _, a := range v.Addrs {
			if slices.Contains(op.Addrs, a) && len(op.Keys) == 0 {
				hit = true
			}
		}
		if hit {
			touched++
			if touched > 25 {
				fmt.Fprintf(&b, "    … more operations\n")
				break
			}
			fmt.Fprintf(&b, "    %s\n", op)
		}
	}
	// The requests under its keys, and under the batches holding them.
	keys := slices.Clone(v.Keys)
	for bk, b := range m.batches {
		if slices.ContainsFunc(b.Members, func(k string) bool { return slices.Contains(v.Keys, k) }) {
			keys = append(keys, bk)
		}
	}
	var reqs []string
	for _, q := range m.requests {
		if q.IdempotencyKey != "" && slices.Contains(keys, q.IdempotencyKey) {
			reqs = append(reqs, fmt.Sprintf("%s %s %s key=%q [%s..%s] => %d dropped=%v replayed=%v fault=%q", q.RequestID, q.Method, q.Path, q.IdempotencyKey,
				q.ReceivedAt.Format("15:04:05.000"), q.AnsweredAt.Format("15:04:05.000"), q.Status, q.Dropped, q.Replayed, q.Fault))
		}
	}
	writeSome(&b, fmt.Sprintf("the fake's requests under %v", keys), reqs, 10)
	var claims []string
	for _, c := range m.claimLog {
		if slices.Contains(keys, c.Key) {
			claims = append(claims, c.String())
		}
	}
	writeSome(&b, fmt.Sprintf("the claims of %v", keys), claims, 10)
	writeSome(&b, fmt.Sprintf("events of %v", v.Addrs), m.eventsText(v.Addrs), 15)
	fmt.Fprintf(&b, "    replay: go test ./integration/ -run 'TestSystem' -system.seeds %d -v", m.seed)
	return b.String()
}

// writeSome writes title and up to most of lines, for an explanation;
// nothing when there are none.
func writeSome(b *strings.Builder, title string, lines []string, most int) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "    %s:\n", title)
	for i, l := range lines {
		if i == most {
			fmt.Fprintf(b, "      … %d more\n", len(lines)-most)
			break
		}
		fmt.Fprintf(b, "      %s\n", l)
	}
}

// opCounts counts the schedule's operations and faults by kind.
func (m *model) opCounts() (ops, faults map[string]int) {
	ops, faults = map[string]int{}, map[string]int{}
	for _, op := range m.ops {
		if k, ok := strings.CutPrefix(op.Kind, "fault-"); ok {
			faults[k]++
		} else {
			ops[op.Kind]++
		}
	}
	return ops, faults
}

func fmtCounts(c map[string]int) string { return joinCounts(c, ":", ",") }
