package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/outbox"
)

// Defaults for SendConfig.
const (
	DefaultReplayWindow  = 23 * time.Hour
	DefaultMaxAttempts   = 10
	DefaultMaxSnoozes    = 20
	DefaultRateLimitWait = 30 * time.Second
	DefaultRetryBase     = time.Second
	DefaultRetryMax      = 10 * time.Minute
)

// SendConfig tunes how a SendWorker maps outcomes to states.
type SendConfig struct {
	// ReplayWindow bounds, from an intent's first attempt, how long its
	// retries and snoozes may go on. The API honours an idempotency key for
	// a limited time (24 h at the email APIs we know); an attempt after that
	// could deliver a second time, so past the window the intent is parked
	// as failed instead. Default 23 h, an hour short of 24 h.
	ReplayWindow time.Duration
	// MaxAttempts is how many times a send is tried (network errors and 5xx
	// after the client's own retries) before it is parked as failed.
	// Snoozes do not count. Default 10.
	MaxAttempts int
	// MaxSnoozes caps how often a send is snoozed for a rate limit or a long
	// Retry-After before it is parked as failed. Default 20.
	MaxSnoozes int
	// RateLimitWait is the snooze after a 429 that named no wait. Default 30 s.
	RateLimitWait time.Duration
	// RetryBase and RetryMax shape River's wait before the next attempt:
	// RetryBase·2^(attempt-1), at most RetryMax, less up to 10% jitter.
	// Defaults 1 s and 10 min.
	RetryBase, RetryMax time.Duration
	// Observer, when set, is told of every attempt's outcome.
	Observer Observer
	// Logger receives a line per outcome; never the API key or bodies.
	Logger *slog.Logger
}

func (c *SendConfig) withDefaults() SendConfig {
	out := *c
	if out.ReplayWindow <= 0 {
		out.ReplayWindow = DefaultReplayWindow
	}
	if out.MaxAttempts <= 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.MaxSnoozes <= 0 {
		out.MaxSnoozes = DefaultMaxSnoozes
	}
	if out.RateLimitWait <= 0 {
		out.RateLimitWait = DefaultRateLimitWait
	}
	if out.RetryBase <= 0 {
		out.RetryBase = DefaultRetryBase
	}
	if out.RetryMax <= 0 {
		out.RetryMax = DefaultRetryMax
	}
	if out.Observer == nil {
		out.Observer = nopObserver{}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

// SendWorker is the River worker that sends one intent through the
// OpenEmail client, with the intent's stored idempotency key, and records
// the outcome on the intent's row.
//
// The row, not the River job, is the source of truth. A success is written
// to the row before the job is completed (by River's batching completer);
// if the process dies in between, the job runs again, finds the row sent
// and completes without calling the API. That is as safe as completing the
// job in the row's transaction (JobCompleteTx), without a transaction per
// job on the hot path.
type SendWorker struct {
	river.WorkerDefaults[outbox.SendArgs]

	pool   *pgxpool.Pool
	client *client.Client
	cfg    SendConfig

	// batch, when set (by Worker.Start), batches the claims and the
	// records of sends running at the same time; without it each send
	// makes its own statements.
	batch *batcher

	// afterSend, when set (by tests), runs after the API answered and
	// before the outcome is recorded; an error from it stands for a crash
	// in that window.
	afterSend func(key string) error
}

// NewSendWorker returns a SendWorker. Register it with river.AddWorker.
func NewSendWorker(pool *pgxpool.Pool, c *client.Client, cfg *SendConfig) *SendWorker {
	if cfg == nil {
		cfg = &SendConfig{}
	}
	return &SendWorker{pool: pool, client: c, cfg: cfg.withDefaults()}
}

// NextRetry spaces River's attempts: RetryBase·2^(attempt-1), at most
// RetryMax, less up to 10% jitter so a fleet recovering from an outage does
// not retry in step.
func (w *SendWorker) NextRetry(job *river.Job[outbox.SendArgs]) time.Time {
	d := w.retryDelay(job.Attempt)
	d -= time.Duration(rand.Int64N(int64(d)/10 + 1))
	return time.Now().Add(d)
}

func (w *SendWorker) retryDelay(attempt int) time.Duration {
	d := w.cfg.RetryBase
	for i := 1; i < attempt && d < w.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, w.cfg.RetryMax)
}

// Work sends the intent named by the job and maps the outcome to a state.
func (w *SendWorker) Work(ctx context.Context, job *river.Job[outbox.SendArgs]) error {
	key := job.Args.Key
	rec, ok, err := w.claim(ctx, key)
	if errors.Is(err, outbox.ErrNotFound) {
		return river.JobCancel(fmt.Errorf("no intent with key %q", key))
	}
	if err != nil {
		return err
	}
	log := w.cfg.Logger.With("key", key, "kind", string(rec.Kind), "attempt", rec.Attempts, "job_id", job.ID)
	if !ok {
		// Sent, failed or canceled already: a job that ran again after a
		// crash, or one whose intent was canceled. Nothing to send.
		log.Debug("intent already settled", "state", string(rec.State))
		w.cfg.Observer.Observe(Outcome{Kind: rec.Kind, Result: ResultSkipped})
		return nil
	}

	now := time.Now()
	windowEnd := rec.FirstAttemptAt.Add(w.cfg.ReplayWindow)
	if now.After(windowEnd) {
		return w.park(ctx, log, rec, ResultExpired, fmt.Sprintf(
			"replay window exceeded: first attempt at %s, window %s; parked rather than risk a second delivery",
			rec.FirstAttemptAt.UTC().Format(time.RFC3339), w.cfg.ReplayWindow))
	}

	start := time.Now()
	res, sendErr := w.send(ctx, rec)
	elapsed := time.Since(start)
	if w.afterSend != nil {
		if err := w.afterSend(key); err != nil {
			return err
		}
	}

	if sendErr == nil {
		if err := w.markSent(ctx, outbox.Sent{Key: key, MessageID: res.messageID, Replayed: res.replayed}); err != nil {
			return err
		}
		result := ResultSent
		if res.replayed {
			result = ResultReplayed
		}
		w.cfg.Observer.Observe(Outcome{Kind: rec.Kind, Result: result, APILatency: elapsed})
		log.Info("sent", "message_id", res.messageID, "replayed", res.replayed)
		return nil
	}

	reason := describe(sendErr)
	var apiErr *client.APIError
	isAPI := errors.As(sendErr, &apiErr)
	switch {
	case errors.Is(sendErr, errUnsendable), errors.Is(sendErr, client.ErrInsecureBaseURL), client.IsPermanent(sendErr):
		w.cfg.Observer.Observe(Outcome{Kind: rec.Kind, Result: ResultFailed, APILatency: elapsed})
		return w.park(ctx, log, rec, "", reason)

	case isAPI && (apiErr.RetryAfter > 0 || apiErr.Status == 429):
		wait := apiErr.RetryAfter
		if wait <= 0 {
			wait = w.cfg.RateLimitWait
		}
		snoozes := snoozeCount(job)
		switch {
		case snoozes >= w.cfg.MaxSnoozes:
			return w.park(ctx, log, rec, ResultFailed, fmt.Sprintf("%s; gave up after %d snoozes", reason, snoozes))
		case now.Add(wait).After(windowEnd):
			return w.park(ctx, log, rec, ResultExpired, fmt.Sprintf(
				"%s; waiting %s would pass the %s replay window, parked rather than risk a second delivery", reason, wait, w.cfg.ReplayWindow))
		}
		if err := outbox.MarkPending(ctx, w.pool, key, reason); err != nil {
			return err
		}
		w.cfg.Observer.Observe(Outcome{Kind: rec.Kind, Result: ResultSnoozed, APILatency: elapsed})
		log.Info("snoozed", "wait", wait, "reason", reason)
		return river.JobSnooze(wait)

	default:
		// A network error or a 5xx after the client's own retries: the send
		// may or may not have reached the API. Try again later with the same
		// key, which replays it if it did.
		if job.Attempt >= w.cfg.MaxAttempts {
			return w.park(ctx, log, rec, ResultFailed, fmt.Sprintf("%s; gave up after %d attempts", reason, job.Attempt))
		}
		if now.Add(w.retryDelay(job.Attempt)).After(windowEnd) {
			return w.park(ctx, log, rec, ResultExpired, fmt.Sprintf(
				"%s; the next attempt would pass the %s replay window, parked rather than risk a second delivery", reason, w.cfg.ReplayWindow))
		}
		if err := outbox.MarkPending(context.WithoutCancel(ctx), w.pool, key, reason); err != nil {
			return err
		}
		w.cfg.Observer.Observe(Outcome{Kind: rec.Kind, Result: ResultRetry, APILatency: elapsed})
		log.Warn("send failed, will retry", "reason", reason)
		return errors.New(reason)
	}
}

func (w *SendWorker) claim(ctx context.Context, key string) (*outbox.Record, bool, error) {
	if w.batch != nil {
		return w.batch.claim(ctx, key)
	}
	return outbox.Claim(ctx, w.pool, key)
}

func (w *SendWorker) markSent(ctx context.Context, s outbox.Sent) error {
	if w.batch != nil {
		return w.batch.markSent(ctx, s)
	}
	return outbox.MarkSent(context.WithoutCancel(ctx), w.pool, s.Key, s.MessageID, s.Replayed)
}

// park marks the intent failed and cancels its job: River must not retry
// what the outbox has given up on.
func (w *SendWorker) park(ctx context.Context, log *slog.Logger, rec *outbox.Record, result Result, reason string) error {
	if err := outbox.MarkFailed(context.WithoutCancel(ctx), w.pool, rec.Key, reason); err != nil {
		return err
	}
	if result != "" {
		w.cfg.Observer.Observe(Outcome{Kind: rec.Kind, Result: result})
	}
	log.Warn("intent failed", "reason", reason)
	return river.JobCancel(errors.New(reason))
}

func snoozeCount(job *river.Job[outbox.SendArgs]) int {
	var meta struct {
		Snoozes int `json:"snoozes"`
	}
	_ = json.Unmarshal(job.Metadata, &meta)
	return meta.Snoozes
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
	return strings.TrimPrefix(err.Error(), "openemail: ")
}
