package worker

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// DefaultReportInterval is how often a worker writes what its sends did
// as a River job (DrainReportArgs), when they did anything.
const DefaultReportInterval = time.Minute

// DrainReportArgs is a River job of kind sendonce_drain: what one worker's
// sends did over one interval. The drain is a loop of the worker's, not a
// River job per intent or per claim, so River UI would otherwise show
// nothing of the sending. Each worker writes one such job per interval in
// which it sent or parked anything (by default a minute: one job per
// worker per minute at most, however many intents), and works it itself:
// the job completes at once with its counts as its output, so River UI
// lists the reports among the queue's completed jobs, with their figures.
type DrainReportArgs struct {
	// Worker is the River client id of the worker that reports.
	Worker string `json:"worker"`
	// From and To bound the interval reported.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Claimed is the attempts made: every outcome below but Coalesced.
	Claimed int `json:"claimed"`
	// Sent is the sends the API accepted fresh, Replayed those it answered
	// from an earlier delivery under the same key.
	Sent     int `json:"sent"`
	Replayed int `json:"replayed"`
	// Retried is the attempts that failed for now (tried again later),
	// Snoozed those put off by a rate limit.
	Retried int `json:"retried"`
	Snoozed int `json:"snoozed"`
	// Parked is the intents parked as failed, expired or suppressed.
	Parked int `json:"parked"`
	// Coalesced is the intents that joined a batch, sent by the batch's job.
	Coalesced int `json:"coalesced"`
}

// Kind is the River job kind of a drain report.
func (DrainReportArgs) Kind() string { return "sendonce_drain" }

// InsertOpts puts a report behind every send of the queue (River's lowest
// priority), tried once: a report is for reading, not worth a retry.
func (DrainReportArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Priority: 4, MaxAttempts: 1}
}

// drainReportWorker completes a report, with its counts as the job's
// output (river.RecordOutput), which River UI shows.
type drainReportWorker struct {
	river.WorkerDefaults[DrainReportArgs]
}

func (drainReportWorker) Work(ctx context.Context, job *river.Job[DrainReportArgs]) error {
	return river.RecordOutput(ctx, job.Args)
}

// report counts the worker's outcomes (it observes them beside the
// configured Observer) and writes them as a DrainReportArgs job every
// interval in which there was any.
type report struct {
	next     Observer // the configured observer, told first
	queue    string
	interval time.Duration

	mu    sync.Mutex
	cur   DrainReportArgs
	since time.Time
}

func newReport(next Observer, queue string, interval time.Duration) *report {
	if next == nil {
		next = nopObserver{}
	}
	return &report{next: next, queue: queue, interval: interval, since: time.Now()}
}

// Observe counts o and tells the configured observer.
func (r *report) Observe(o Outcome) {
	r.next.Observe(o)
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.cur
	switch o.Result {
	case ResultSent:
		c.Sent++
	case ResultReplayed:
		c.Replayed++
	case ResultRetry:
		c.Retried++
	case ResultSnoozed:
		c.Snoozed++
	case ResultFailed, ResultExpired, ResultSuppressed:
		c.Parked++
	case ResultCoalesced:
		c.Coalesced++
		return
	default:
		return
	}
	c.Claimed++
}

// take returns the counts since the last take, and starts a new interval.
func (r *report) take(now time.Time) DrainReportArgs {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cur
	c.From, c.To = r.since, now
	r.cur, r.since = DrainReportArgs{}, now
	return c
}

// run writes a report every interval until ctx ends. The interval a stop
// cuts short is not reported: its job would wait for another worker.
func (r *report) run(ctx context.Context, rc *river.Client[pgx.Tx]) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.write(ctx, rc)
		}
	}
}

// write inserts the report of the interval just ended, unless nothing
// happened in it. A report that cannot be written is dropped: the counts
// are for reading, and the next interval's go on.
func (r *report) write(ctx context.Context, rc *river.Client[pgx.Tx]) {
	args := r.take(time.Now())
	if args.Claimed == 0 && args.Coalesced == 0 {
		return
	}
	args.Worker = rc.ID()
	opts := args.InsertOpts()
	opts.Queue = r.queue
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _ = rc.Insert(ctx, args, &opts)
}
