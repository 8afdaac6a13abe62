package worker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/base/sendjob"
	"github.com/sendonce/sendonce/internal/engine/sendstate"
	"github.com/sendonce/sendonce/outbox"
)

// batchWorker is the River worker that sends one frozen batch of coalesced
// email intents: its stored body under its own key, one request and one
// budget token for up to 100 emails. Its attempts follow the same rules as
// a single send's (window, retries, snoozes, 429s, shutdown), recorded on
// the batch and all its members; the API's answer is mapped back to each
// member: its own message id, or its own error.
type batchWorker struct {
	river.WorkerDefaults[sendjob.BatchArgs]

	w       *sendWorker
	batcher *sendstate.Batcher
}

// NextRetry spaces attempts as a single send's.
func (bw *batchWorker) NextRetry(job *river.Job[sendjob.BatchArgs]) time.Time {
	return bw.w.NextRetry(&river.Job[sendjob.Args]{JobRow: job.JobRow})
}

// Work sends the batch and records each member's outcome. It runs in a
// span (a child of River's job span) linked to the spans that enqueued the
// members, with the claim and the HTTP attempts as children.
func (bw *batchWorker) Work(ctx context.Context, job *river.Job[sendjob.BatchArgs]) (err error) {
	w := bw.w
	ctx = sendstate.WithStatusHook(ctx, w.onStatus)
	ctx, span := w.tracer.Start(ctx, spanSendBatch, trace.WithAttributes(attrBatchKey.String(job.Args.Key), attrJobID.Int64(job.ID)))
	defer func() { endSend(span, err) }()
	releaseSend, err := w.acquireSend(ctx)
	if err != nil {
		return err
	}
	defer releaseSend()
	bulk := job.Args.RunKey != ""
	leasedAt, err := w.waitForBudget(ctx, bulk)
	if err != nil {
		return err
	}
	b, ok, err := bw.claim(ctx, job)
	if err != nil {
		return err
	}
	if !ok {
		state, _, err := sendstate.PeekBatch(ctx, w.pool, job.Args.Key)
		if err != nil {
			return river.JobCancel(err)
		}
		span.SetAttributes(attrOutcome.String("skipped"))
		w.cfg.Logger.Debug("batch job skipped", "batch", job.Args.Key, "state", state, "job_id", job.ID)
		return nil
	}
	if bw.reportParked(span, b) {
		return nil // every member was parked: nothing to send
	}
	// The send stops when the lease it was claimed under does.
	ctx, release := w.bindLease(ctx, b.Owner)
	defer release()
	span.SetAttributes(attrMembers.Int(len(b.Members)), attrAttempt.Int(b.Attempts))
	first := b.FirstAttemptAt
	rec := &outbox.Record{Key: b.Key, Kind: outbox.KindEmail, Attempts: b.Attempts, Snoozes: b.Snoozes,
		FirstAttemptAt: &first, APIKeyFingerprint: b.APIKeyFingerprint, Uncertain: b.Uncertain}
	log := w.cfg.Logger.With("batch", b.Key, "members", len(b.Members), "attempt", b.Attempts, "job_id", job.ID)
	if err := bw.linkMembers(ctx, span, b); err != nil {
		log.Warn("batch span not linked to its members' traces", "error", err)
	}
	a := &attempt{w: w, jobID: job.ID, jobAttempt: job.Attempt, rec: rec, log: log, claimedAt: time.Now(),
		windowLeft: b.WindowLeft, batch: true, bulk: bulk, span: span, owner: b.Owner, leasedAt: leasedAt, rateLimited: rateLimitedBefore(job.JobRow)}
	if err := a.check(ctx); err != nil {
		return err
	}

	sendCtx, cancel := context.WithTimeout(ctx, b.WindowLeft)
	defer cancel()
	start := time.Now()
	var answer *client.BatchResult
	_, sendErr := a.sendPaced(ctx, sendCtx, func() (sendResult, error) {
		var err error
		answer, err = w.client.Emails.SendBatchJSON(sendCtx, b.Body, client.WithIdempotencyKey(b.Key))
		return sendResult{}, err
	})
	elapsed := time.Since(start)
	if w.afterSend != nil {
		if err := w.afterSend(b.Key); err != nil {
			return err
		}
	}
	if sendErr == nil {
		return bw.record(ctx, a, b, answer, elapsed)
	}
	if parts := splitParts(b.Members, sendErr); parts != nil {
		// Uncertain from an earlier job's attempt, or from an earlier
		// request of this very call (the client retried a lost answer and
		// the retry was refused): either may have been delivered.
		if b.Uncertain || client.MayHaveBeenDelivered(sendErr) {
			return bw.parkUnsplit(ctx, a, sendErr)
		}
		return bw.split(ctx, a, parts, sendErr)
	}
	return a.failed(ctx, sendCtx, sendErr, elapsed)
}

// claim claims the batch for the job, in a span of its own.
func (bw *batchWorker) claim(ctx context.Context, job *river.Job[sendjob.BatchArgs]) (b *sendstate.Batch, ok bool, err error) {
	w := bw.w
	cctx, cspan := w.startClaim(ctx)
	copts, err := w.claimOptions()
	if err == nil {
		opts := sendstate.BatchClaimOptions{ClaimOptions: copts,
			ParkPartlySuppressed: w.cfg.PartlySuppressed == PartlySuppressedPark}
		b, ok, err = sendstate.ClaimBatch(cctx, w.pool, sendstate.ClaimRequest{Key: job.Args.Key, JobID: job.ID}, opts)
	}
	if ok {
		endClaim(cspan, ok, b.Attempts, b.Uncertain, err)
	} else {
		endClaim(cspan, ok, 0, false, err)
	}
	return b, ok, err
}

// parkUnsplit parks a batch refused whole after an earlier attempt whose
// outcome is unknown (an answer lost, a crash mid-request): that attempt may
// have been delivered, and the API holds it under the batch's key, so a
// split would send the members again under new keys and deliver each twice
// (a refusal on a later attempt says nothing of an earlier one: a proxy in
// between, a validation rule changed). It is parked failed and uncertain,
// as a single send is; a retry sends the same body under the same key.
func (bw *batchWorker) parkUnsplit(ctx context.Context, a *attempt, sendErr error) error {
	return a.park(ctx, ResultFailed, true, describe(sendErr)+"; not split: an earlier attempt of this batch may have "+
		"been delivered, and its emails sent again under new keys could be delivered twice; check whether they were "+
		"delivered, then retry (the same request under the same key)")
}

// reportParked tells of the members the batch's first claim took out for
// the suppression list (and of those it sends without some recipients),
// and reports whether none is left to send.
func (bw *batchWorker) reportParked(span trace.Span, b *sendstate.Batch) (none bool) {
	w := bw.w
	log := w.cfg.Logger.With("batch", b.Key)
	for _, p := range b.Parked {
		if p.Failed {
			w.cfg.Observer.Observe(Outcome{Kind: outbox.KindEmail, Result: ResultFailed})
			log.Warn("batch member failed at the batch's first claim; not sent", "key", p.Key, "reason", p.Reason)
			continue
		}
		w.cfg.Observer.Observe(Outcome{Kind: outbox.KindEmail, Result: ResultSuppressed})
		log.Info("batch member suppressed; taken out of the batch before its first attempt", "key", p.Key)
	}
	if len(b.Stripped) > 0 {
		log.Info("batch members sent without suppressed recipients", "keys", b.Stripped)
	}
	if len(b.Members) > 0 {
		return false
	}
	span.SetAttributes(attrOutcome.String("suppressed"))
	log.Info("batch not sent: every member was suppressed at its first claim", "parked", len(b.Parked))
	return true
}

// record maps the API's answer to the members, in order: data[i] is the
// answer for the i-th email of the body.
func (bw *batchWorker) record(ctx context.Context, a *attempt, b *sendstate.Batch, answer *client.BatchResult, elapsed time.Duration) error {
	var sent []sendstate.Sent
	var failed []sendstate.ItemFailure
	for i, key := range b.Members {
		switch {
		case i >= len(answer.Data):
			failed = append(failed, sendstate.ItemFailure{Key: key, Uncertain: true, Reason: fmt.Sprintf(
				"the answer to batch %s held %d items for %d emails; this email's outcome is unknown",
				b.Key, len(answer.Data), len(b.Members))})
		case answer.Data[i].Error != nil:
			failed = append(failed, sendstate.ItemFailure{Key: key, Reason: describeItem(answer.Data[i].Error, b.Key)})
		case answer.Data[i].ID == "":
			failed = append(failed, sendstate.ItemFailure{Key: key, Uncertain: true, Reason: fmt.Sprintf(
				"the answer to batch %s gave this email (item %d) neither an id nor an error; its outcome is unknown", b.Key, i)})
		default:
			sent = append(sent, sendstate.Sent{Key: key, MessageID: answer.Data[i].ID, Replayed: answer.Replayed})
		}
	}
	overrode, err := sendstate.RecordBatch(context.WithoutCancel(ctx), a.w.pool, b.Key, a.owner, b.Attempts, sent, failed)
	if err == nil {
		a.w.recorded.Store(true)
	}
	if errors.Is(err, sendstate.ErrLeaseLost) {
		return a.notRecorded("")
	}
	if errors.Is(err, sendstate.ErrSuperseded) {
		a.note("not recorded")
		a.log.Warn("batch answered, but its job ran again beside this attempt and claimed it since; nothing recorded: "+
			"the later attempt sends the same request under the same key and records the API's answer (a replay)", "replayed", answer.Replayed)
		return nil
	}
	if err != nil {
		return err
	}
	if len(overrode) > 0 {
		a.log.Warn("sent by an attempt that overlapped the one that parked them as failed; recorded as sent", "keys", overrode)
	}
	result := ResultSent
	if answer.Replayed {
		result = ResultReplayed
	}
	a.note("sent", attrReplayed.Bool(answer.Replayed), attrSent.Int(len(sent)), attrFailed.Int(len(failed)))
	// An outcome per member; the one API call's latency once.
	obs, latency := a.w.cfg.Observer, elapsed
	for range sent {
		obs.Observe(Outcome{Kind: outbox.KindEmail, Result: result, APILatency: latency})
		latency = 0
	}
	for range failed {
		obs.Observe(Outcome{Kind: outbox.KindEmail, Result: ResultFailed, APILatency: latency})
		latency = 0
	}
	a.log.Info("batch sent", "sent", len(sent), "failed", len(failed), "replayed", answer.Replayed)
	return nil
}

// split replaces a batch the API refused whole with its parts.
func (bw *batchWorker) split(ctx context.Context, a *attempt, parts []sendstate.SplitPart, sendErr error) error {
	reason := describe(sendErr)
	o := a.outcome(fmt.Sprintf("%s; the API refused the batch whole, so nothing of it was sent: split into %d parts to send the rest", reason, len(parts)), false, false)
	keys, ok, err := bw.batcher.Split(context.WithoutCancel(ctx), o, parts)
	if err != nil {
		return err
	}
	if !ok {
		return nil // no longer this job's batch
	}
	a.note("split", attrReason.String(reason))
	a.w.cfg.Observer.Observe(Outcome{Kind: outbox.KindEmail, Result: ResultSplit})
	sizes := make([]int, len(parts))
	for i, p := range parts {
		sizes[i] = len(p.Members)
	}
	a.log.Warn("batch refused whole; split to send the rest", "reason", reason, "parts", sizes, "new_batches", keys)
	return nil
}

// itemParam finds the email a batch error names: "emails[3].to".
var itemParam = regexp.MustCompile(`^emails\[(\d+)\]`)

// splitParts says how to split a batch the API refused whole, or nil when
// it must not be split. Only a validation refusal (400 or 422, not a key
// reuse) is split: it means nothing of this request was accepted, and one
// email may be the cause. (It says nothing of earlier attempts: Work never
// splits a batch that is uncertain.) When the refusal names the email, that one is
// failed with the reason and the rest go on together; otherwise the batch is
// halved, and halved again, until the cause is alone.
func splitParts(members []string, sendErr error) []sendstate.SplitPart {
	var apiErr *client.APIError
	if len(members) < 2 || !errors.As(sendErr, &apiErr) || (apiErr.Status != 400 && apiErr.Status != 422) ||
		apiErr.Code == "idempotency_key_reuse" || apiErr.Code == "invalid_idempotency_key" {
		return nil
	}
	if m := itemParam.FindStringSubmatch(apiErr.Param); m != nil {
		if i, err := strconv.Atoi(m[1]); err == nil && i < len(members) {
			rest := append(append([]string{}, members[:i]...), members[i+1:]...)
			return []sendstate.SplitPart{
				{Members: []string{members[i]}, Failed: describe(sendErr) + "; the API named this email when it refused its batch"},
				{Members: rest},
			}
		}
	}
	half := len(members) / 2
	return []sendstate.SplitPart{{Members: members[:half]}, {Members: members[half:]}}
}

// describeItem renders one refused item of a batch's answer.
func describeItem(e *client.ItemError, batchKey string) string {
	s := fmt.Sprintf("%s: %s (refused within batch %s)", e.Code, e.Message, batchKey)
	if e.Param != "" {
		s = fmt.Sprintf("%s: %s (param %s; refused within batch %s)", e.Code, e.Message, e.Param, batchKey)
	}
	return s
}
