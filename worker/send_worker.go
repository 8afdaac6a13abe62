package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/base/budget"
	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/base/suppress"
	"github.com/sendonce/sendonce/internal/base/unsub"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/outbox"
)

// sendWorker is the River worker that sends one intent through the
// OpenEmail client, with the intent's stored idempotency key, and records
// the outcome on the intent's row.
//
// The row, not the River job, is the source of truth. A success is written
// to the row before the job is completed (by River's batching completer);
// if the process dies in between, the job runs again, finds the row sent
// and completes without calling the API. That is as safe as completing the
// job in the row's transaction (JobCompleteTx), without a transaction per
// job on the hot path.
type sendWorker struct {
	river.WorkerDefaults[sendjob.Args]

	pool   *pgxpool.Pool
	client *client.Client
	cfg    SendConfig
	// onStatus is Config.OnStatus, carried into each send's context.
	onStatus outbox.StatusHook
	// riverLog, when set (by New), is told of the errors a job's work
	// logged itself, so River does not log them again.
	riverLog *riverLog

	// batch, when set (by Worker.Start), batches the claims and the
	// records of sends running at the same time; without it each send
	// makes its own statements.
	batch *batcher

	// recorded says a send was recorded since the sweeper last looked: a
	// delivery event that came before its record is matched at the next
	// sweep, by this worker (sweeper.sweep).
	recorded atomic.Bool

	// dueIn, when set (by New), wakes the worker's drain when an intent
	// whose retry or snooze this worker recorded comes due.
	dueIn func(time.Duration)

	// lease is this worker instance's liveness (set by Worker.Start): its
	// epoch is recorded with each claim and checked by each record; nil
	// when the sendWorker runs on a River client of the application's own.
	lease *liveness

	// signer, when set (from SendConfig.Unsubscribe), signs the
	// List-Unsubscribe headers of intents with a topic.
	signer *unsub.Signer

	// keyFingerprint identifies the client's API key.
	keyFingerprint string

	// budget, when set (by New), paces sends to the fleet's rate limit.
	budget *budget.Budget

	// queue is the River queue worked, whose intents the drain claims
	// (set by New; "" is outbox.DefaultQueue).
	queue string

	// sends bounds the sends in flight at once, of the drain and of River
	// jobs (batches, and intents with a job of their own) together, to
	// Config.Concurrency (set by New; nil: no bound).
	sends chan struct{}

	// coalesce, when set (by Worker.Start with Config.Coalesce), gathers
	// email intents into batches.
	coalesce *coalescer

	// coalesceWait, set (by New) with Config.Coalesce, is how long the
	// drain holds a due email intent for its coalescing before it claims
	// it alone (sendstate.ClaimOptions.CoalesceWait); zero otherwise.
	coalesceWait time.Duration

	// tracer makes the send's spans (see trace.go); the global provider's
	// unless Config.TracerProvider names another.
	tracer trace.Tracer

	// afterSend, when set (by tests), runs after the API answered and
	// before the outcome is recorded; an error from it stands for a crash
	// in that window.
	afterSend func(key string) error
}

// newSendWorker returns a sendWorker. Register it with river.AddWorker.
func newSendWorker(pool *pgxpool.Pool, c *client.Client, cfg *SendConfig) *sendWorker {
	if cfg == nil {
		cfg = &SendConfig{}
	}
	w := &sendWorker{pool: pool, client: c, cfg: cfg.withDefaults(), keyFingerprint: c.KeyFingerprint(), tracer: otel.Tracer(tracerName)}
	if u := cfg.Unsubscribe; u != nil {
		w.signer, _ = unsub.New(u.URL, u.Mailto, u.Secret) // checked by SendConfig.validate
	}
	return w
}

// NextRetry spaces River's attempts: RetryBase·2^(attempt-1), at most
// RetryMax, less up to 10% jitter so a fleet recovering from an outage does
// not retry in step.
func (w *sendWorker) NextRetry(job *river.Job[sendjob.Args]) time.Time {
	d := w.cfg.retryDelay(job.Attempt)
	d -= time.Duration(rand.Int64N(int64(d)/10 + 1))
	return time.Now().Add(d)
}

// retryDelay is River's wait before the attempt after attempt, without
// jitter: RetryBase·2^(attempt-1), at most RetryMax.
func (c *SendConfig) retryDelay(attempt int) time.Duration {
	d := c.RetryBase
	for i := 1; i < attempt && d < c.RetryMax; i++ {
		d *= 2
	}
	return min(d, c.RetryMax)
}

// Work sends the intent named by the job and maps the outcome to a state.
// With coalescing on, an email intent first offers itself to a batch; once
// frozen into one, its job is done and the batch's job sends it.
//
// It runs in a span (a child of River's job span) that links to the span
// the intent was enqueued in, with the claim and the HTTP attempts as
// children and the outcome as attributes.
func (w *sendWorker) Work(ctx context.Context, job *river.Job[sendjob.Args]) (err error) {
	ctx = sendstate.WithStatusHook(ctx, w.onStatus)
	key := job.Args.Key
	ctx, span := w.tracer.Start(ctx, spanSend, trace.WithAttributes(
		attrKey.String(key), attrKind.String(job.Args.IntentKind), attrJobID.Int64(job.ID)))
	defer func() { endSend(span, err) }()
	if w.coalesce != nil && job.Args.IntentKind == string(outbox.KindEmail) {
		batchKey, err := w.coalesce.join(ctx, job.Queue, job.Args.RunKey, sendstate.ClaimRequest{Key: key, JobID: job.ID})
		if err != nil {
			return err
		}
		if batchKey != "" {
			span.SetAttributes(attrOutcome.String("coalesced"), attrBatchKey.String(batchKey))
			w.cfg.Observer.Observe(Outcome{Kind: outbox.KindEmail, Result: ResultCoalesced})
			return nil
		}
	}
	// One of the worker's sends in flight, shared with its drain.
	release, err := w.acquireSend(ctx)
	if err != nil {
		return err
	}
	defer release()
	// Wait for the fleet's budget before claiming: waiting is not an
	// attempt, starts no replay window and counts against no limit.
	bulk := job.Args.RunKey != ""
	leasedAt, err := w.waitForBudget(ctx, bulk)
	if err != nil {
		return err
	}
	cctx, cspan := w.startClaim(ctx)
	c, ok, err := w.claim(cctx, sendstate.ClaimRequest{Key: key, JobID: job.ID})
	if ok {
		endClaim(cspan, ok, c.Record.Attempts, c.Record.Uncertain, err)
	} else {
		endClaim(cspan, ok, 0, false, err)
	}
	if err != nil || !ok {
		if w.budget != nil {
			w.budget.Return(1) // no request: the token is the fleet's again
		}
		if err != nil {
			return err
		}
		return w.skip(ctx, job)
	}
	a := &attempt{w: w, jobID: job.ID, jobAttempt: job.Attempt, claimedAt: time.Now(), bulk: bulk, span: span,
		leasedAt: leasedAt, token: w.budget != nil, rateLimited: rateLimitedBefore(job.JobRow)}
	return a.run(ctx, c)
}

// run makes the attempt of a claimed intent: the checks that may park it
// without a request, the paced call, and the outcome's record. A token of
// the fleet's budget taken for it and not spent on a request (the intent
// was parked, or the lease ended first) goes back to the budget.
func (a *attempt) run(ctx context.Context, c *sendstate.Claimed) (err error) {
	w := a.w
	defer func() {
		if a.token && !a.spent {
			w.budget.Return(1)
		}
	}()
	// The send stops when the lease it was claimed under does: the intent
	// may be another worker's by then.
	ctx, release := w.bindLease(ctx, c.Owner)
	defer release()
	rec := c.Record
	a.rec, a.windowLeft, a.owner = rec, c.WindowLeft, c.Owner
	span := a.span
	if l, ok := enqueuerLink(rec.TraceParent, rec.TraceState); ok {
		span.AddLink(l)
	}
	span.SetAttributes(attrAttempt.Int(rec.Attempts))
	log := w.cfg.Logger.With("key", rec.Key, "kind", string(rec.Kind), "attempt", rec.Attempts)
	if a.jobID != 0 {
		log = log.With("job_id", a.jobID)
	}
	a.log = log
	if err := a.check(ctx); err != nil {
		return err
	}
	if parked, err := a.listUnsubscribe(ctx); parked || err != nil {
		return err
	}
	if parked, err := a.suppress(ctx); parked || err != nil {
		return err
	}

	// No HTTP attempt may start, or go on, past the window's end.
	sendCtx, cancel := context.WithTimeout(ctx, c.WindowLeft)
	defer cancel()
	start := time.Now()
	res, sendErr := a.sendPaced(ctx, sendCtx, func() (sendResult, error) { return w.send(sendCtx, a.rec) })
	elapsed := time.Since(start)
	if w.afterSend != nil {
		if err := w.afterSend(rec.Key); err != nil {
			return err
		}
	}
	if sendErr == nil {
		return a.sent(ctx, res, elapsed)
	}
	return a.failed(ctx, sendCtx, sendErr, elapsed)
}

// check parks the claimed send when it must not be attempted: its replay
// window has run out, or the API key changed after an attempt whose outcome
// is unknown.
func (a *attempt) check(ctx context.Context) error {
	w, rec := a.w, a.rec
	if a.windowLeft <= 0 {
		return a.park(ctx, ResultExpired, false, fmt.Sprintf(
			"replay window exceeded: first attempt at %s, window %s; parked rather than risk a second delivery",
			rec.FirstAttemptAt.UTC().Format(time.RFC3339), w.cfg.ReplayWindow))
	}
	if w.keyFingerprint != "" && rec.APIKeyFingerprint != w.keyFingerprint {
		return a.park(ctx, ResultFailed, false, fmt.Sprintf(
			"the API key changed (%s, now %s) after an attempt whose outcome is unknown: the API may scope "+
				"idempotency keys per API key, so a send with the new key could deliver it a second time; "+
				"parked: check whether it was delivered, then retry it with force",
			rec.APIKeyFingerprint, w.keyFingerprint))
	}
	return nil
}

// PartlySuppressed is the policy for an intent with some recipients on the
// suppression list.
type PartlySuppressed string

// The PartlySuppressed policies.
const (
	PartlySuppressedSend PartlySuppressed = "send" // send to the recipients not suppressed
	PartlySuppressedPark PartlySuppressed = "park" // park the intent as suppressed
)

// suppress applies the suppression list's verdict, taken at the intent's
// first claim (rec.SuppressedRecipients): the body goes without those
// recipients, the same on every attempt, or, when no "to" recipient would
// be left (or the policy parks a partly suppressed intent at its first
// claim), the intent is parked as suppressed and the job ends without an
// API call.
func (a *attempt) suppress(ctx context.Context) (parked bool, err error) {
	rec := a.rec
	if len(rec.SuppressedRecipients) == 0 {
		return false, nil
	}
	body, none, err := suppress.Strip(string(rec.Kind), rec.Payload, rec.SuppressedRecipients)
	if err != nil {
		return true, a.park(ctx, ResultFailed, false, fmt.Sprintf("%v: cannot take the suppressed recipients out", err))
	}
	first := rec.Attempts == 1 && !rec.Uncertain
	if !none && !(first && a.w.cfg.PartlySuppressed == PartlySuppressedPark) {
		a.log.Info("sending without suppressed recipients", "suppressed", len(rec.SuppressedRecipients))
		stripped := *rec
		stripped.Payload = body
		a.rec = &stripped
		return false, nil
	}
	reason := "not sent: every recipient is on the suppression list"
	if !none {
		reason = "not sent: some recipients are on the suppression list, and partly suppressed intents are parked"
	}
	if err := sendstate.MarkSuppressed(context.WithoutCancel(ctx), a.w.pool, a.outcome(reason, false, false)); err != nil {
		return true, err
	}
	a.note("suppressed")
	a.w.cfg.Observer.Observe(Outcome{Kind: rec.Kind, Result: ResultSuppressed})
	a.log.Info("intent suppressed; no API call", "suppressed", len(rec.SuppressedRecipients))
	return true, nil
}

// sendPaced makes the call and tells the fleet's budget of a 429. A 429
// that is a fleet signal (the budget decides: see budget.Refused) slows
// the fleet, and the send waits for a token and goes again. Any other 429
// is this intent's own trouble (issue 23: two intents the API kept
// refusing slowed a thousand others 22×): the loop ends and failed backs
// the intent off on its own, outside its River slot. So does a 429 of an
// intent that met one before, which the fleet is not told of at all. A
// quota's 429 is the fleet's whoever met it: the send waits for the
// budget, held until the quota resets.
func (a *attempt) sendPaced(ctx, sendCtx context.Context, call func() (sendResult, error)) (sendResult, error) {
	w := a.w
	call = a.answering(ctx, call) // the budget hears every answer: rate headers, quotas
	a.spent = true
	res, err := call()
	for w.budget != nil && client.IsRateLimited(err) && ctx.Err() == nil {
		var apiErr *client.APIError
		errors.As(err, &apiErr)
		w.cfg.Observer.Observe(Outcome{Kind: a.rec.Kind, Result: ResultRateLimited})
		// A quota's 429 (the answer says so) is the fleet's, whoever met
		// it: answering has told the budget, which holds the fleet until
		// the quota resets. It is not the intent's 429 in a row, and the
		// budget hears no Refused of it (a rate 429's evidence).
		if answerOf(res, err).Quota == "" {
			repeat := a.rateLimited > 0
			a.rateLimited++
			if repeat {
				break
			}
			fleet, terr := w.budget.Refused(ctx, apiErr.RetryAfter, a.leasedAt)
			if terr != nil {
				a.log.Warn("cannot tell the fleet of a 429", "error", terr)
			}
			if !fleet {
				break
			}
		}
		a.fleetSignal = true
		t, werr := w.budget.Acquire(sendCtx, w.budgetWaitBound(sendCtx), a.bulk)
		if werr != nil || !t.OK {
			a.budgetRetryIn = t.RetryIn
			break
		}
		a.leasedAt = t.LeasedAt
		res, err = call()
	}
	if w.budget != nil && served(err) {
		// Ends the fleet's probing after a long Retry-After, if it was.
		if serr := w.budget.Served(ctx); serr != nil {
			a.log.Warn("cannot tell the fleet the API serves again", "error", serr)
		}
	}
	return res, err
}

// served reports whether the API answered a call other than with a 429 or
// a server error: it takes requests again.
func served(err error) bool {
	var apiErr *client.APIError
	return err == nil || (errors.As(err, &apiErr) && apiErr.Status != 429 && apiErr.Status < 500)
}

// attempt is one claimed send on its way to an outcome.
type attempt struct {
	w          *sendWorker
	jobID      int64
	jobAttempt int            // River's attempt number
	rec        *outbox.Record // for a batch: its key, attempts, snoozes and window
	log        *slog.Logger
	claimedAt  time.Time
	windowLeft time.Duration // at claimedAt, by the database's clock

	// budgetRetryIn is when the fleet's budget expects a token, after a
	// 429 this attempt could not wait out.
	budgetRetryIn time.Duration
	// leasedAt is when the budget leased the token of the request in
	// flight (zero: no budget, or unknown).
	leasedAt time.Time
	// rateLimited counts the intent's 429s in a row: those of its job's
	// earlier tries (kept in the job's metadata), then this attempt's.
	rateLimited int
	// fleetSignal is set when a 429 of this attempt was a fleet signal:
	// it waits for the fleet's budget, not on its own.
	fleetSignal bool

	// batch is set when the attempt sends a coalesced batch: outcomes
	// other than the API's answer are recorded on the batch and all its
	// members.
	batch bool
	// bulk is set for a send of a run: it yields the budget to others.
	bulk bool
	// span is the send's span, which the outcome is noted on.
	span trace.Span
	// owner is the lease epoch of the claim, carried by every record.
	owner int32
	// token is set when a token of the fleet's budget was taken for the
	// attempt; spent once a request was made with it. A token not spent
	// goes back to the budget when the attempt ends.
	token, spent bool
	// drained is set for an intent without a River job of its own, claimed
	// by the drain: a retry is recorded on its row (next_attempt_at), not
	// left to River.
	drained bool
}

// left is what remains of the replay window now.
func (a *attempt) left() time.Duration { return a.windowLeft - time.Since(a.claimedAt) }

func (a *attempt) outcome(reason string, uncertain, snoozed bool) sendstate.Outcome {
	o := sendstate.Outcome{Key: a.rec.Key, JobID: a.jobID, Reason: reason, Uncertain: uncertain, Snoozed: snoozed, Owner: a.owner,
		RateLimited: sendstate.KeepRateLimited}
	if a.batch {
		// A run of the batch's job that a later claim superseded (River
		// ran the job again beside it) records nothing.
		o.Attempt = a.rec.Attempts
	}
	return o
}

func (a *attempt) sent(ctx context.Context, res sendResult, elapsed time.Duration) error {
	overrode, err := a.w.markSent(ctx, sendstate.Sent{Key: a.rec.Key, MessageID: res.messageID, Replayed: res.replayed, Owner: a.owner})
	if errors.Is(err, sendstate.ErrLeaseLost) {
		return a.notRecorded(res.messageID)
	}
	if err != nil {
		return err
	}
	if overrode {
		a.log.Warn("sent by an attempt that overlapped the one that parked it as failed; recorded as sent",
			"message_id", res.messageID, "replayed", res.replayed)
	}
	result := ResultSent
	if res.replayed {
		result = ResultReplayed
	}
	a.note("sent", attrMessageID.String(res.messageID), attrReplayed.Bool(res.replayed))
	a.w.cfg.Observer.Observe(Outcome{Kind: a.rec.Kind, Result: result, APILatency: elapsed})
	a.log.Info("sent", "message_id", res.messageID, "replayed", res.replayed)
	return nil
}

// notRecorded ends an attempt whose answer came after its lease ended: the
// intent is another job's (a sweeper handed it on, or its next claim
// will), which sends it again under the same key, so the API replays this
// delivery to it. Nothing is recorded here.
func (a *attempt) notRecorded(messageID string) error {
	a.note("not recorded", attrMessageID.String(messageID))
	a.log.Warn("the API answered after this worker's lease ended; nothing recorded: "+
		"the intent is another job's, which replays it under the same key", "message_id", messageID, "epoch", a.owner)
	return nil
}

// markPending records an attempt that will be tried again.
func (a *attempt) markPending(ctx context.Context, o sendstate.Outcome) error {
	if a.batch {
		return sendstate.MarkBatchPending(context.WithoutCancel(ctx), a.w.pool, o)
	}
	return sendstate.MarkPending(context.WithoutCancel(ctx), a.w.pool, o)
}

// park marks the intent failed and cancels its job: River must not retry
// what the outbox has given up on.
func (a *attempt) park(ctx context.Context, result Result, uncertain bool, reason string) error {
	o := a.outcome(reason, uncertain, false)
	mark := sendstate.MarkFailed
	if a.batch {
		mark = sendstate.MarkBatchFailed
	}
	if err := mark(context.WithoutCancel(ctx), a.w.pool, o); err != nil {
		return err
	}
	a.note("failed", attrUncertain.Bool(uncertain), attrReason.String(reason))
	if a.span != nil {
		a.span.SetStatus(codes.Error, reason)
	}
	if result != "" {
		a.w.cfg.Observer.Observe(Outcome{Kind: a.rec.Kind, Result: result})
	}
	a.log.Warn("intent failed", "reason", reason)
	return river.JobCancel(errors.New(reason))
}

// skip ends a job that may not send: its intent is sent, failed or canceled
// already (a job that ran again after a crash, or one whose intent was
// canceled), or has been given another job since (Retry, or the sweeper
// after this job was taken for lost), or is gone.
func (w *sendWorker) skip(ctx context.Context, job *river.Job[sendjob.Args]) error {
	p, err := sendstate.Peek(ctx, w.pool, job.Args.Key)
	if errors.Is(err, outbox.ErrNotFound) {
		return river.JobCancel(fmt.Errorf("no intent with key %q", job.Args.Key))
	}
	if err != nil {
		return err
	}
	log := w.cfg.Logger.With("key", job.Args.Key, "job_id", job.ID)
	if p.State == outbox.StatePending && p.JobID != nil && *p.JobID == job.ID {
		log.Info("run paused: the job ends without sending; resuming the run gives the intent a new job", "run", job.Args.RunKey)
	} else if (p.State == outbox.StatePending || p.State == outbox.StateSending) && p.JobID != nil {
		log.Info("job superseded: the intent has another job", "intent_job_id", *p.JobID)
	} else if rerunByHand(job.JobRow, p.State) {
		warnRerun(log, job.Args.Key, p.State)
	} else {
		log.Debug("intent already settled", "state", string(p.State))
	}
	trace.SpanFromContext(ctx).SetAttributes(attrOutcome.String("skipped"))
	w.cfg.Observer.Observe(Outcome{Kind: p.Kind, Result: ResultSkipped})
	return nil
}

// maxBudgetWait bounds how long a send holds its River slot waiting for the
// budget; past it the job is snoozed and comes back when a token is due.
const maxBudgetWait = 30 * time.Second

// acquireSend waits for one of the worker's sends in flight (see sends),
// and returns what gives it back.
func (w *sendWorker) acquireSend(ctx context.Context) (release func(), err error) {
	if w.sends == nil {
		return func() {}, nil
	}
	select {
	case w.sends <- struct{}{}:
		return func() { <-w.sends }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a send slot: %w", ctx.Err())
	}
}

// waitForBudget waits for a token, or returns the snooze that gives the
// job's slot back until one is due. A bulk send (of a run) yields to the
// others. It returns when the token was leased (zero without a budget).
// A worker that stops closes the budget: every send waiting in it is
// snoozed at once, before its claim, so a stop is prompt however many wait
// and a wait cut short is no attempt.
func (w *sendWorker) waitForBudget(ctx context.Context, bulk bool) (leasedAt time.Time, err error) {
	if w.budget == nil {
		return time.Time{}, nil
	}
	start := time.Now()
	t, err := w.budget.Acquire(ctx, w.budgetWaitBound(ctx), bulk)
	switch {
	case err != nil && ctx.Err() != nil:
		// Shutdown: back to the queue, no attempt counted.
		return time.Time{}, fmt.Errorf("waiting for the send budget: %w", ctx.Err())
	case err != nil:
		return time.Time{}, err
	case !t.OK:
		w.cfg.Observer.Observe(Outcome{Result: ResultBudgetSnoozed, BudgetWait: time.Since(start)})
		// Back when a token is due, and within MaxPause at the latest,
		// whatever the budget expects (the budget bounds it too).
		return time.Time{}, river.JobSnooze(min(max(t.RetryIn, time.Second), w.cfg.MaxPause))
	}
	w.cfg.Observer.Observe(Outcome{Result: ResultBudgetToken, BudgetWait: time.Since(start)})
	return t.LeasedAt, nil
}

// budgetWaitBound is how long a send may wait for a token: maxBudgetWait,
// or half of what is left of the job's time.
func (w *sendWorker) budgetWaitBound(ctx context.Context) time.Duration {
	d := maxBudgetWait
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)/2)
	}
	return d
}

func (w *sendWorker) claim(ctx context.Context, req sendstate.ClaimRequest) (*sendstate.Claimed, bool, error) {
	if w.batch != nil {
		return w.batch.claim(ctx, req)
	}
	opts, err := w.claimOptions()
	if err != nil {
		return nil, false, err
	}
	return sendstate.Claim(ctx, w.pool, req, opts)
}

// claimOptions are a claim's options now: the lease's epoch is the owner,
// and while the lease is not known to be held nothing is claimed
// (sendstate.ErrLeaseLost: the job runs again later).
func (w *sendWorker) claimOptions() (sendstate.ClaimOptions, error) {
	o := sendstate.ClaimOptions{KeyFingerprint: w.keyFingerprint, ReplayWindow: w.cfg.ReplayWindow, Queue: w.queue,
		CoalesceWait: w.coalesceWait}
	if w.lease != nil {
		epoch, ok := w.lease.owner()
		if !ok {
			return o, fmt.Errorf("worker: claim: %w", sendstate.ErrLeaseLost)
		}
		o.Owner = epoch
	}
	return o, nil
}

// bindLease is ctx, ended also when the lease of epoch stops being held.
func (w *sendWorker) bindLease(ctx context.Context, epoch int32) (context.Context, context.CancelFunc) {
	if w.lease == nil || epoch == 0 {
		return ctx, func() {}
	}
	return w.lease.bind(ctx, epoch)
}

func (w *sendWorker) markSent(ctx context.Context, s sendstate.Sent) (bool, error) {
	if w.batch != nil {
		return w.batch.markSent(ctx, s)
	}
	return sendstate.MarkSent(context.WithoutCancel(ctx), w.pool, s)
}

// describe renders an error for last_error and the logs: status, code and
// message for API errors, never a body or a credential.
func describe(err error) string {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		s := fmt.Sprintf("%d %s: %s", apiErr.Status, apiErr.Code, apiErr.Message)
		if apiErr.Param != "" {
			s += fmt.Sprintf(" (param %s)", apiErr.Param)
		}
		if apiErr.RetryAfter > 0 {
			s += fmt.Sprintf(" (retry after %s)", apiErr.RetryAfter)
		}
		return s
	}
	return strings.TrimPrefix(err.Error(), "client: ")
}
