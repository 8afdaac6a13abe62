package outbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/base/store"
)

// Run is a group of intents sent as one thing: a billing run, a campaign,
// one occurrence of a weekly digest. Its key is derived from its cause
// (billing:2026-12, never a clock); its members are the intents enqueued
// with it. A run can be watched (RunStatus), paused, resumed, canceled and
// rescheduled as a whole. Its members go out at a lower priority than lone
// intents, so a campaign never holds back a password reset.
type Run struct {
	// Key names the run: 1 to 200 letters, digits, "_", ".", ":" or "-".
	Key string
	// SendAt holds every member until then (zero: now), unless a member
	// has a SendAt of its own.
	SendAt time.Time
	// Intents are the members to enqueue.
	Intents []Intent
	// Topic is the topic of the members that name none of their own (see
	// Intent.Topic; a broadcast member keeps none), in Go and for members
	// inserted by SQL with the run's key alike. It is set when the run is
	// created; enqueueing into the run again leaves its topic as it was.
	Topic string
	// Tenant is the run's tenant, and its members' (see Intent.Tenant):
	// a member that names none takes it, one that names another is
	// refused (*InvalidError), in Go and for members inserted by SQL with
	// the run's key alike. Empty: the default tenant for a new run; for a
	// run there already, its tenant as it was set when it was created
	// (a run's tenant never changes: another is refused).
	Tenant string
	// Breaker is the run's bounce-rate breaker (nil: the defaults,
	// DefaultBreakerBounceRate and the others; see Breaker). It is set when
	// the run is created; enqueueing into the run again leaves it as it
	// was (SetRunBreaker changes it).
	Breaker *Breaker
}

// RunState is where a run stands.
type RunState string

// The states of a run. Active, paused and canceled are the run's row
// (sendonce_run.state); done is counted from its members.
const (
	RunActive   RunState = "active"
	RunPaused   RunState = "paused"   // no member is claimed; sends in flight finish
	RunCanceled RunState = "canceled" // every member not yet attempted was canceled
	// RunDone is an active run that has members and none of them is
	// waiting or being sent: every one is settled (sent, failed, canceled
	// or suppressed). It is RunStatus's, never the row's: a member
	// enqueued into it later makes it active again.
	RunDone RunState = "done"
)

var runKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,200}$`)

// RunStatus is a run and its members' progress.
type RunStatus struct {
	Key string `json:"key"`
	// State is the run's state: its row's (active, paused, canceled), or
	// done for an active run whose members are all settled (Settled).
	// Every reader (sendonce runs and run show, the outbox page, the
	// metrics) shows this one.
	State      RunState   `json:"state"`
	SendAt     *time.Time `json:"sendAt,omitempty"`
	Schedule   string     `json:"schedule,omitempty"`
	Occurrence *time.Time `json:"occurrence,omitempty"`
	// Tenant is the run's tenant, and its members'; empty for the default
	// tenant (DefaultTenant).
	Tenant    string    `json:"tenant,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// Counts holds the members in each state (every state present).
	Counts map[State]int64 `json:"counts"`
	// Total is the number of members.
	Total int64 `json:"total"`
	// SentLastMinute is how many members were sent in the last minute: the
	// run's pace now.
	SentLastMinute int64 `json:"sentLastMinute"`
	// Deliveries counts the members by delivery status, from the API's
	// webhooks (only the statuses some member has).
	Deliveries map[DeliveryStatus]int64 `json:"deliveries"`
	// Breaker is the run's bounce-rate breaker: its settings, its counts,
	// and why it paused the run (Breaker.Reason, while it holds it paused).
	Breaker *RunBreaker `json:"breaker"`
}

// Done reports whether no member is waiting or being sent.
func (s *RunStatus) Done() bool {
	return s.Counts[StatePending] == 0 && s.Counts[StateSending] == 0
}

// Settled reports whether the run has members and every one of them is
// settled: nothing is left to send, nor to cancel.
func (s *RunStatus) Settled() bool {
	return s.Total > 0 && s.Done()
}

// Left is how long the members still to send take at the pace of the last
// minute; zero when done, or when nothing was sent in the last minute.
func (s *RunStatus) Left() time.Duration {
	todo := s.Counts[StatePending] + s.Counts[StateSending]
	if todo == 0 || s.SentLastMinute == 0 {
		return 0
	}
	return time.Duration(float64(todo) / float64(s.SentLastMinute) * float64(time.Minute))
}

// RunResult is what EnqueueRun did.
type RunResult struct {
	// Created is false when the run was there already: its members were
	// enqueued as by EnqueueMany, the existing ones left as they are.
	Created bool
	// Intents holds one result per member, in order.
	Intents []*EnqueueResult
}

// ErrRunCanceled matches (errors.Is) an enqueue into a canceled run.
var ErrRunCanceled = errors.New("outbox: the run is canceled")

// EnqueueRun writes a run and its members in the caller's transaction.
// Enqueueing a run again is idempotent as a whole: the run is there once,
// and each member whose key is there already with the same payload is
// Existing (another payload is a *KeyReuseError), so a producer that
// crashed halfway, or enqueues a big run in several transactions, runs
// again and adds only what is missing. A new member of a canceled run is
// refused with ErrRunCanceled.
func (o *Outbox) EnqueueRun(ctx context.Context, tx pgx.Tx, run Run) (*RunResult, error) {
	if !runKeyPattern.MatchString(run.Key) {
		return nil, invalid("run key", fmt.Sprintf(
			"%q: want 1 to 200 letters, digits, \"_\", \".\", \":\" and \"-\"", shorten(run.Key)))
	}
	if err := ValidateTopic(run.Topic); err != nil {
		return nil, err
	}
	if err := ValidateTenant(run.Tenant); err != nil {
		return nil, err
	}
	breaker, err := run.Breaker.row()
	if err != nil {
		return nil, err
	}
	// Before anything is written: a member naming another tenant than the
	// one the run is given. (With none given, the run's tenant is known
	// once its row is read: the default tenant's for a new run.)
	if run.Tenant != "" {
		if err := sameTenant(run.Key, run.Tenant, run.Intents); err != nil {
			return nil, err
		}
	}
	var sendAt *time.Time
	if !run.SendAt.IsZero() {
		sendAt = &run.SendAt
	}
	ptx, err := forProducer(ctx, tx)
	if err != nil {
		return nil, err
	}
	tx = ptx
	res := &RunResult{}
	var state RunState
	// The run's row is read FOR SHARE, so that a cancel under way is
	// waited for (issue 22; see store.CreateRun).
	var created bool
	var st, tenant string
	created, st, tenant, err = store.CreateRun(ctx, tx, run.Key, sendAt, run.Topic, run.Tenant, breaker)
	res.Created, state = created, RunState(st)
	if err != nil {
		return nil, fmt.Errorf("outbox: enqueue run %q: %w", run.Key, err)
	}
	if run.Tenant != "" && run.Tenant != tenant {
		return nil, invalid("tenant", fmt.Sprintf("run %q is tenant %q, not %q: a run's tenant is set when it is created",
			run.Key, TenantName(tenant), run.Tenant))
	}
	// With no tenant given, the members are the tenant's of the run as it
	// is (of a run there already, nothing was written).
	if err := sameTenant(run.Key, tenant, run.Intents); err != nil {
		return nil, err
	}
	if state == RunCanceled {
		// Members already there are Existing as ever; a new one is refused.
		keys := make([]string, len(run.Intents))
		for i, in := range run.Intents {
			keys[i] = in.Key
		}
		missing, err := store.AnyNewKey(ctx, tx, keys)
		if err != nil {
			return nil, fmt.Errorf("outbox: enqueue run %q: %w", run.Key, err)
		}
		if missing {
			return nil, &RunStateError{Key: run.Key, Op: "enqueue into", State: state, Reason: "a canceled run takes no new members"}
		}
	}
	intents := make([]Intent, len(run.Intents))
	for i, in := range run.Intents {
		in.run = run.Key
		if in.SendAt.IsZero() {
			in.SendAt = run.SendAt
		}
		// The run's tenant, as the run's tenant trigger gives it to
		// plain-SQL members: EnqueueMany's rows are checked, and skip it.
		in.Tenant = tenant
		intents[i] = in
	}
	if res.Intents, err = o.EnqueueMany(ctx, tx, intents); err != nil {
		return nil, err
	}
	return res, nil
}

// sameTenant refuses a member of run key that names a tenant other than
// the run's (tenant; "": the default tenant). A member that names none
// takes the run's.
func sameTenant(key, tenant string, members []Intent) error {
	for i := range members {
		t := members[i].Tenant
		if t == "" || t == tenant {
			continue
		}
		if err := ValidateTenant(t); err != nil {
			err.(*InvalidError).Index = i
			return err
		}
		return &InvalidError{Index: i, Field: "tenant", Reason: fmt.Sprintf(
			"intent %q names tenant %q, but its run %q is tenant %q: a run's members are its tenant's (name none to take the run's)",
			shorten(members[i].Key), t, shorten(key), TenantName(tenant))}
	}
	return nil
}

// RunListParams select runs for Runs.
type RunListParams struct {
	// Limit bounds the runs returned, newest first (default 50).
	Limit int
}

// Runs lists runs, newest first, with their progress: two queries, however
// many runs (the metrics read it at every scrape).
func (o *Outbox) Runs(ctx context.Context, p *RunListParams) ([]*RunStatus, error) {
	limit := 50
	if p != nil && p.Limit > 0 {
		limit = p.Limit
	}
	out, err := runStatuses(ctx, o.pool, func() ([]store.RunRow, error) { return store.NewestRuns(ctx, o.pool, limit) })
	if err != nil {
		return nil, fmt.Errorf("outbox: runs: %w", err)
	}
	return out, nil
}

// RunStatus reads a run and counts its members. It returns an error
// matching ErrNotFound when there is no such run.
func (o *Outbox) RunStatus(ctx context.Context, key string) (*RunStatus, error) {
	return runStatus(ctx, o.pool, key)
}

func runStatus(ctx context.Context, db store.DB, key string) (*RunStatus, error) {
	out, err := runStatuses(ctx, db, func() ([]store.RunRow, error) { return store.RunByKey(ctx, db, key) })
	switch {
	case err != nil:
		return nil, fmt.Errorf("outbox: run %q: %w", key, err)
	case len(out) == 0:
		return nil, fmt.Errorf("%w: run %q", ErrNotFound, key)
	}
	return out[0], nil
}

// runStatuses reads the runs (with read, one query), then counts all
// their members in one query.
func runStatuses(ctx context.Context, db store.DB, read func() ([]store.RunRow, error)) ([]*RunStatus, error) {
	runs, err := read()
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return []*RunStatus{}, nil
	}
	out := make([]*RunStatus, len(runs))
	for i, r := range runs {
		st := &RunStatus{Counts: map[State]int64{}, Deliveries: map[DeliveryStatus]int64{}}
		for _, s := range States {
			st.Counts[s] = 0
		}
		st.Key, st.State, st.SendAt, st.Schedule, st.Occurrence = r.Key, RunState(r.State), r.SendAt, r.Schedule, r.Occurrence
		st.CreatedAt, st.UpdatedAt, st.Tenant = r.CreatedAt, r.UpdatedAt, r.Tenant
		st.Breaker = runBreaker(r.Breaker)
		out[i] = st
	}
	byKey := make(map[string]*RunStatus, len(out))
	keys := make([]string, len(out))
	for i, st := range out {
		byKey[st.Key], keys[i] = st, st.Key
	}
	// The counts come from the runs' tally, the sending members from the
	// table (see store.RunTallies).
	err = store.RunTallies(ctx, db, keys, func(t store.RunTally) {
		st, s, d, n := byKey[t.RunKey], State(t.State), DeliveryStatus(t.Delivery), t.N
		switch {
		case t.Live:
			st.Counts[StatePending] -= n
			st.Counts[StateSending] += n
			return
		case s == StateSending:
			st.Counts[StatePending] += n
		default:
			st.Counts[s] += n
		}
		st.Total += n
		st.SentLastMinute += t.Recent
		if d != "" {
			st.Deliveries[d] += n
		}
	})
	if err != nil {
		return nil, err
	}
	for _, st := range out {
		if st.State == RunActive && st.Settled() {
			st.State = RunDone
		}
	}
	return out, nil
}

// RunStateError is the error of an operation a run's state does not allow.
type RunStateError struct {
	Key    string
	Op     string
	State  RunState
	Reason string
}

func (e *RunStateError) Error() string {
	return fmt.Sprintf("outbox: cannot %s run %q: it is %s: %s", e.Op, e.Key, e.State, e.Reason)
}

// Is makes a RunStateError about a canceled run match ErrRunCanceled.
func (e *RunStateError) Is(target error) bool {
	return target == ErrRunCanceled && e.State == RunCanceled
}

// lockRun locks a run and returns its state, or a *RunStateError when it
// is in none of the allowed states.
func lockRun(ctx context.Context, tx pgx.Tx, key, op string, allowed ...RunState) (RunState, error) {
	st, err := store.LockRunForUpdate(ctx, tx, key)
	if err != nil {
		return "", notFound(fmt.Errorf("run %q: %w", key, err), key)
	}
	cur := RunState(st)
	for _, a := range allowed {
		if cur == a {
			return cur, nil
		}
	}
	reason := map[RunState]string{
		RunPaused:   "resume it first",
		RunActive:   "it is not paused",
		RunCanceled: "a canceled run stays canceled",
	}[cur]
	return cur, &RunStateError{Key: key, Op: op, State: cur, Reason: reason}
}

// setRunState moves a locked run to state.
func setRunState(ctx context.Context, tx pgx.Tx, key string, state RunState) error {
	return store.SetRunState(ctx, tx, key, string(state))
}

// PauseRun pauses a run: no member is claimed until ResumeRun (the drain's
// claim skips a paused run's members); sends in flight finish.
func (o *Outbox) PauseRun(ctx context.Context, key string) (*RunStatus, error) {
	return o.runOp(ctx, key, "pause", func(tx pgx.Tx) error {
		if _, err := lockRun(ctx, tx, key, "pause", RunActive); err != nil {
			return err
		}
		return setRunState(ctx, tx, key, RunPaused)
	})
}

// ResumeRun resumes a paused run: its members are claimed again, and every
// frozen batch whose job ended while it was paused gets a new one. A run
// its breaker paused is resumed too; the breaker then judges only the
// outcomes that come after the resume (so it does not pause the run again
// at once on the same figures), and a resume without a change of the
// breaker's settings since the trip (SetRunBreaker) is logged as a
// warning.
func (o *Outbox) ResumeRun(ctx context.Context, key string) (*RunStatus, error) {
	return o.runOp(ctx, key, "resume", func(tx pgx.Tx) error {
		if _, err := lockRun(ctx, tx, key, "resume", RunPaused); err != nil {
			return err
		}
		if err := o.resumeBreaker(ctx, tx, key); err != nil {
			return err
		}
		if err := setRunState(ctx, tx, key, RunActive); err != nil {
			return err
		}
		if err := o.giveRunJobs(ctx, tx, key); err != nil {
			return err
		}
		return wakeDrains(ctx, tx)
	})
}

// giveRunJobs hands the run's members still to send whose River job of
// their own (from a release before the drain) ended while the run was
// paused to the drain, and gives a new job to every frozen batch of the
// run whose job is gone or finished.
func (o *Outbox) giveRunJobs(ctx context.Context, tx pgx.Tx, key string) error {
	if err := store.RunMembersToDrain(ctx, tx, key); err != nil {
		return err
	}
	// Frozen batches whose job ended while the run was paused.
	_, err := store.GiveRunBatchJobs(ctx, tx, o.river, key, func(k, queue string) river.InsertManyParams {
		return river.InsertManyParams{Args: sendjob.BatchArgs{Key: k, RunKey: key},
			InsertOpts: sendjob.InsertOpts(queue, time.Time{}, sendjob.PriorityBulk)}
	})
	return err
}

// RunCancel is what CancelRun did.
type RunCancel struct {
	// Canceled counts the members canceled now.
	Canceled int64 `json:"canceled"`
	// Left counts the members left as they were: attempted already (they
	// may have reached the API), or settled.
	Left int64 `json:"left"`
	// Status is the run after the cancel.
	Status *RunStatus `json:"status"`
}

// CancelRun cancels a run, atomically: every member whose send has not
// started is canceled, with every frozen batch of the run not yet
// attempted; members attempted already are left as they are (they may have
// reached the API) and counted. New members cannot be enqueued into it.
//
// A worker freezing a batch of the run locks the run's row too (FOR
// SHARE, before its members), so the two never overlap: a freeze in
// progress is waited for, and its batch, never attempted, is canceled with
// its members and counted; a freeze after the cancel finds the run
// canceled and freezes nothing.
func (o *Outbox) CancelRun(ctx context.Context, key string) (*RunCancel, error) {
	res := &RunCancel{}
	st, err := o.runOp(ctx, key, "cancel", func(tx pgx.Tx) error {
		// The run's lock first: it waits for a freeze of the run in
		// progress, whose batch the statements below then see.
		if _, err := lockRun(ctx, tx, key, "cancel", RunActive, RunPaused); err != nil {
			return err
		}
		// A run whose members are all settled has nothing left to cancel:
		// marking it canceled would say its sent members were not. Read
		// under the run's lock, which an enqueue into it waits for.
		cur, err := runStatus(ctx, tx, key)
		if err != nil {
			return err
		}
		if cur.Settled() {
			return &RunStateError{Key: key, Op: "cancel", State: cur.State, Reason: fmt.Sprintf(
				"every one of its %d members is settled (%s): nothing is left to cancel", cur.Total, settledCounts(cur))}
		}
		if err := setRunState(ctx, tx, key, RunCanceled); err != nil {
			return err
		}
		// Batches first, then members: the order the worker locks them in.
		if err := store.CancelRunBatches(ctx, tx, key); err != nil {
			return err
		}
		// A member whose send has not started: never attempted, or
		// released by the split of a batch the API refused whole (its
		// attempt counted, but first_attempt_at cleared: nothing of it
		// can have been delivered).
		n, err := store.CancelRunMembers(ctx, tx, key)
		res.Canceled = n
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Status = st
	res.Left = st.Total - st.Counts[StateCanceled]
	return res, nil
}

// settledCounts is "40 sent" or "38 sent, 2 failed": a settled run's
// members by state.
func settledCounts(st *RunStatus) string {
	var parts []string
	for _, s := range States {
		if n := st.Counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	return strings.Join(parts, ", ")
}

// RescheduleSlack is how far before the database's clock a time given to
// RescheduleRun may be and still be taken as now.
const RescheduleSlack = time.Minute

// RescheduleRun moves a run's members whose send has not started to at:
// each is held on its row until then, for the workers' drains (frozen
// batches not yet attempted are undone, their members rescheduled with the
// others; a member that had a River job of its own, from a release before
// the drain, goes to the drain too, and its old job ends without sending).
// It returns how many it moved. A time in the past is refused
// (*InvalidError), so that a mistyped date never releases a run at once:
// at must be ahead, or now. To allow for a caller's clock a little behind
// the database's, a time up to RescheduleSlack before the database's clock
// is taken as now (the members go at once).
func (o *Outbox) RescheduleRun(ctx context.Context, key string, at time.Time) (int64, error) {
	if at.IsZero() {
		return 0, invalid("time", "zero time")
	}
	var n int64
	_, err := o.runOp(ctx, key, "reschedule", func(tx pgx.Tx) error {
		if _, err := lockRun(ctx, tx, key, "reschedule", RunActive, RunPaused); err != nil {
			return err
		}
		// The database's clock, the one the drain compares send_at with.
		now, err := store.RunClock(ctx, tx)
		if err != nil {
			return err
		}
		if at.Before(now.Add(-RescheduleSlack)) {
			return invalid("time", fmt.Sprintf("%s is in the past (the database's clock says %s): a run is rescheduled "+
				"to a time ahead, or now (sendonce run reschedule KEY now)",
				at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)))
		}
		if err := store.SetRunSendAt(ctx, tx, key, at); err != nil {
			return err
		}
		if err := store.UndoRunBatches(ctx, tx, key); err != nil {
			return err
		}
		// One statement moves them all, and gives every one to the drain
		// (job_id NULL): a job held until the old time, its own or its
		// undone batch's, no longer names the row, so it ends without
		// sending. A paused run's members stay unclaimed until ResumeRun.
		moved, err := store.RescheduleRunMembers(ctx, tx, key, at)
		if err != nil {
			return err
		}
		n = moved
		return wakeDrains(ctx, tx)
	})
	return n, err
}

// runOp runs fn in a transaction and returns the run's status after it.
func (o *Outbox) runOp(ctx context.Context, key, op string, fn func(pgx.Tx) error) (*RunStatus, error) {
	var st *RunStatus
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		var err error
		st, err = runStatus(ctx, tx, key)
		return err
	})
	if err != nil {
		var rse *RunStateError
		var inv *InvalidError
		if errors.As(err, &rse) || errors.As(err, &inv) || errors.Is(err, ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("outbox: %s run %q: %w", op, key, err)
	}
	return st, nil
}
