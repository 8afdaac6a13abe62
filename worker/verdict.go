package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
)

// This file is the send-once guarantee's outcome table as one pure
// function: how an attempt that did not succeed ends (decide), and the one
// function that applies the verdict (apply: mark, observe, log). The table
// in docs/command.md ("How an outcome becomes a state") is its description, and
// TestDecide reads as that table.

// action is what becomes of the intent and its River job.
type action int

const (
	// actRetry: pending, uncertain; River tries again after its backoff
	// (SendConfig.RetryBase doubling), and the attempt counts.
	actRetry action = iota
	// actRequeue: pending, uncertain; back to the queue without counting
	// the attempt (the worker stopped, or its lease ended).
	actRequeue
	// actSnooze: pending; the job is snoozed for the verdict's wait.
	actSnooze
	// actPark: failed; the job is cancelled, River must not retry it.
	actPark
)

func (a action) String() string {
	return [...]string{"retry", "requeue", "snooze", "park"}[a]
}

// keepRateLimited leaves the intent's 429s in a row, in its job's
// metadata, as they are.
const keepRateLimited = -1

// attemptEnd is what decide knows of an attempt that did not succeed.
type attemptEnd struct {
	// err is what the send returned.
	err error
	// canceled is set when the worker's own context was canceled (a
	// shutdown, a cancel from River, or its lease ending).
	canceled bool
	// windowEnded is set when the replay window ended during the attempt
	// (the send's context expired, the worker's did not).
	windowEnded bool
	// left is what remains of the replay window now.
	left time.Duration
	// jobAttempt is River's attempt number; snoozes the intent's snoozes
	// for a Retry-After so far.
	jobAttempt, snoozes int
	// rateLimited is the intent's 429s in a row, this attempt's included;
	// rateLimitWait the snooze the last of them earns (rateLimitWait).
	rateLimited   int
	rateLimitWait time.Duration
	// fleetSignal and budget shape the reason of a rate-limited intent
	// parked for its window: whether the fleet's budget holds it back, or
	// its own backoff.
	fleetSignal, budget bool
	// firstAttemptAt is the intent's first attempt, for the reasons.
	firstAttemptAt *time.Time
}

// verdict is how an attempt ends.
type verdict struct {
	action action
	// result is what the observer is told ("" nothing); withLatency adds
	// the API call's latency.
	result      Result
	withLatency bool
	// uncertain marks the intent's row: some attempt's outcome is unknown.
	uncertain bool
	// snoozed counts the snooze against SendConfig.MaxSnoozes.
	snoozed bool
	// wait is the snooze (actSnooze).
	wait time.Duration
	// reason is the row's last_error and the log line's.
	reason string
	// rateLimited is the intent's 429s in a row to keep in its job's
	// metadata (keepRateLimited: leave them).
	rateLimited int
}

// decide maps an attempt that did not succeed to its verdict. It does no
// I/O: apply carries the verdict out.
func decide(e attemptEnd, cfg *SendConfig) verdict {
	reason := describe(e.err)
	var apiErr *client.APIError
	isAPI := errors.As(e.err, &apiErr)
	keep := keepRateLimited
	switch {
	case e.canceled:
		// Cut off by the worker's shutdown (or a cancel from River): the send
		// may have reached the API. Returning the context's error lets River
		// put the job back without counting an attempt, so a deploy never
		// burns an intent's attempts or parks it.
		return verdict{action: actRequeue, result: ResultRetry, withLatency: true, uncertain: mayHaveReached(e.err), reason: reason, rateLimited: keep}

	case e.windowEnded && client.IsRateLimited(e.err):
		// The replay window ended while the send waited for the fleet's
		// budget after a 429: the window ends the intent, not the 429,
		// whose answer means the API took nothing.
		return verdict{action: actPark, result: ResultExpired, reason: windowReason(e, cfg, 0), rateLimited: keep}

	case e.windowEnded:
		// The replay window ended during the attempt.
		return verdict{action: actPark, result: ResultExpired, uncertain: mayHaveReached(e.err), rateLimited: keep, reason: fmt.Sprintf(
			"%s; the %s replay window ended during the attempt, parked rather than risk a second delivery", reason, cfg.ReplayWindow)}

	case errors.Is(e.err, errUnsendable), errors.Is(e.err, client.ErrInsecureBaseURL), client.IsPermanent(e.err):
		// A 409 may be the API saying the key is in use by a request in
		// progress: the intent may yet be delivered. A refusal that came
		// after an attempt of the same call without a known outcome (the
		// client retried a lost answer, and the retry was refused) says
		// nothing of that attempt, which may have been delivered: parked
		// uncertain, so that no retry takes it for "not sent".
		uncertain := isAPI && (apiErr.Status == 409 || apiErr.Uncertain)
		if isAPI && apiErr.Uncertain {
			reason += "; " + uncertainRefusal
		}
		return verdict{action: actPark, result: ResultFailed, withLatency: true, uncertain: uncertain, reason: reason, rateLimited: keep}

	case isAPI && (apiErr.RetryAfter > 0 || apiErr.Status == 429):
		return decideWait(e, cfg, apiErr, reason)

	default:
		// A network error, a timeout or a 5xx after the client's own
		// retries: the send may or may not have reached the API. Try again
		// later with the same key, which replays it if it did. A connection
		// that was never made (refused, a DNS failure, with no earlier
		// attempt of the call in doubt) delivered nothing: the intent is
		// not marked uncertain, so an operator may cancel it.
		uncertain := mayHaveReached(e.err)
		if e.jobAttempt >= cfg.MaxAttempts {
			return verdict{action: actPark, result: ResultFailed, uncertain: uncertain, rateLimited: keep,
				reason: fmt.Sprintf("%s; gave up after %d attempts", reason, e.jobAttempt)}
		}
		if cfg.retryDelay(e.jobAttempt) >= e.left {
			return verdict{action: actPark, result: ResultExpired, uncertain: uncertain, rateLimited: keep, reason: fmt.Sprintf(
				"%s; the next attempt would pass the %s replay window, parked rather than risk a second delivery", reason, cfg.ReplayWindow)}
		}
		if e.rateLimited > 0 {
			keep = 0 // the 429s in a row are over
		}
		return verdict{action: actRetry, result: ResultRetry, withLatency: true, uncertain: uncertain, reason: reason, rateLimited: keep}
	}
}

// mayHaveReached reports whether an attempt that ended in err, not an
// answer of the API, may have reached it: anything but a network failure
// the client shows came before any byte of the request left (the
// connection refused or never made, a DNS failure) after no attempt of the
// same call whose outcome is unknown (client.MayHaveBeenDelivered). An
// error that is not the client's is taken as possibly delivered.
func mayHaveReached(err error) bool {
	var netErr *client.NetworkError
	return !errors.As(err, &netErr) || client.MayHaveBeenDelivered(err)
}

// decideWait is decide for an answer that names a wait: a 429, or another
// error with a Retry-After the client would not wait. A rate limit never
// parks an intent: it waits, bounded only by the replay window.
// MaxSnoozes caps long Retry-After waits of errors.
func decideWait(e attemptEnd, cfg *SendConfig, apiErr *client.APIError, reason string) verdict {
	rateLimited := apiErr.Status == 429
	wait, keep := apiErr.RetryAfter, keepRateLimited
	if rateLimited {
		wait, keep = e.rateLimitWait, e.rateLimited
	}
	uncertain := apiErr.Status >= 500 || apiErr.Uncertain
	park := verdict{action: actPark, uncertain: uncertain, rateLimited: keep}
	switch {
	case !rateLimited && e.snoozes >= cfg.MaxSnoozes:
		park.result, park.reason = ResultFailed, fmt.Sprintf("%s; gave up after %d snoozes", reason, e.snoozes)
		return park
	case rateLimited && wait >= e.left:
		park.result, park.reason = ResultExpired, windowReason(e, cfg, wait)
		return park
	case wait >= e.left:
		park.result, park.reason = ResultExpired, fmt.Sprintf(
			"%s; waiting %s would pass the %s replay window, parked rather than risk a second delivery", reason, wait, cfg.ReplayWindow)
		return park
	}
	return verdict{action: actSnooze, result: ResultSnoozed, withLatency: true, uncertain: uncertain,
		snoozed: !rateLimited, wait: wait, reason: reason, rateLimited: keep}
}

// uncertainRefusal ends the reason of a refusal that followed an attempt
// of the same call whose outcome is unknown (client.APIError.Uncertain).
const uncertainRefusal = "an earlier attempt of this send ended without an answer and may have been delivered: " +
	"check whether it was, before a retry (which sends the same request under the same key)"

// windowReason is why an intent the API rate-limited is parked: its replay
// window ends before the fleet's budget lets it go again (in wait; 0: it
// ended while the send waited). The reason is the window's: a 429 never
// parks an intent by itself.
func windowReason(e attemptEnd, cfg *SendConfig, wait time.Duration) string {
	first := "unknown"
	if e.firstAttemptAt != nil {
		first = e.firstAttemptAt.UTC().Format(time.RFC3339)
	}
	if wait <= 0 {
		return fmt.Sprintf("replay window exceeded while the send waited for the fleet's rate limit: first attempt at %s, window %s; "+
			"parked rather than risk a second delivery", first, cfg.ReplayWindow)
	}
	why := "the fleet's rate limit lets this send go again"
	if !e.fleetSignal && e.budget {
		why = fmt.Sprintf("this send may go again after %d 429s in a row (it backs off on its own; the fleet sends on)", e.rateLimited)
	}
	return fmt.Sprintf("replay window ends in %s, before %s (in %s): first attempt at %s, "+
		"window %s; parked rather than risk a second delivery", max(e.left, 0).Round(time.Second), why, wait.Round(time.Second), first, cfg.ReplayWindow)
}

// retryIn is when a drained intent is due again after verdict v (not a
// park): a retry after SendConfig.RetryBase doubling, less up to 10%
// jitter, as NextRetry spaces a job's; a snooze after its wait; a requeue
// (the worker stopped, or its lease ended) at once.
func (a *attempt) retryIn(v verdict) time.Duration {
	switch v.action {
	case actRetry:
		d := a.w.cfg.retryDelay(a.jobAttempt)
		return d - time.Duration(rand.Int64N(int64(d)/10+1))
	case actSnooze:
		return v.wait
	}
	return 0
}

// failed ends an attempt that did not succeed: decide, then apply.
func (a *attempt) failed(ctx, sendCtx context.Context, sendErr error, elapsed time.Duration) error {
	return a.apply(ctx, decide(a.ended(ctx, sendCtx, sendErr), &a.w.cfg), elapsed)
}

// ended gathers what decide needs of the attempt now.
func (a *attempt) ended(ctx, sendCtx context.Context, sendErr error) attemptEnd {
	e := attemptEnd{
		err:         sendErr,
		canceled:    ctx.Err() == context.Canceled,
		windowEnded: ctx.Err() == nil && sendCtx.Err() != nil,
		left:        a.left(), jobAttempt: a.jobAttempt, snoozes: a.rec.Snoozes,
		rateLimited: a.rateLimited, fleetSignal: a.fleetSignal, budget: a.w.budget != nil,
		firstAttemptAt: a.rec.FirstAttemptAt,
	}
	var apiErr *client.APIError
	if errors.As(sendErr, &apiErr) && apiErr.Status == 429 {
		e.rateLimitWait = a.rateLimitWait(apiErr.RetryAfter)
	}
	return e
}

// apply carries a verdict out: it marks the intent's row, notes the span,
// tells the observer, logs, and returns what ends the River job.
func (a *attempt) apply(ctx context.Context, v verdict, elapsed time.Duration) error {
	w := a.w
	if v.rateLimited != keepRateLimited && !a.drained {
		w.setRateLimited(ctx, v.rateLimited)
	}
	observed := Outcome{Kind: a.rec.Kind, Result: v.result}
	if v.withLatency {
		observed.APILatency = elapsed
	}
	if v.action == actPark {
		if v.withLatency {
			w.cfg.Observer.Observe(observed)
			return a.park(ctx, "", v.uncertain, v.reason)
		}
		return a.park(ctx, v.result, v.uncertain, v.reason)
	}
	o := a.outcome(v.reason, v.uncertain, v.snoozed)
	if a.drained {
		// The row keeps what River kept for a job: when the intent is
		// due again, and its 429s in a row.
		o.RateLimited, o.RetryIn = v.rateLimited, a.retryIn(v)
		o.GiveBack = v.action == actSnooze || v.action == actRequeue
	}
	if err := a.markPending(ctx, o); err != nil {
		return err
	}
	if a.drained && w.dueIn != nil {
		w.dueIn(o.RetryIn)
	}
	noted := "pending"
	if v.action == actSnooze {
		noted = "snoozed"
	}
	a.note(noted, attrUncertain.Bool(v.uncertain), attrReason.String(v.reason))
	w.cfg.Observer.Observe(observed)
	switch {
	case v.action == actSnooze:
		a.log.Info("snoozed", "wait", v.wait, "reason", v.reason)
		return river.JobSnooze(v.wait)
	case v.action == actRequeue && errors.Is(context.Cause(ctx), sendstate.ErrLeaseLost):
		// The lease it was claimed under stopped being held: the
		// intent may be another worker's now, whose record stands.
		a.log.Warn("send cut off: this worker's lease was not renewed in time; nothing more is sent or recorded under it", "reason", v.reason, "epoch", a.owner)
		w.riverLog.loggedError(ctx, a.jobID)
		return fmt.Errorf("%s: %w", v.reason, context.Cause(ctx))
	case v.action == actRequeue:
		a.log.Info("send cut off by shutdown; it goes back to the queue", "reason", v.reason)
		w.riverLog.loggedError(ctx, a.jobID)
		return fmt.Errorf("%s: %w", v.reason, ctx.Err())
	}
	a.log.Warn("send failed, will retry", "reason", v.reason)
	w.riverLog.loggedError(ctx, a.jobID) // River's "Job errored; retrying" would say it again
	return errors.New(v.reason)
}
