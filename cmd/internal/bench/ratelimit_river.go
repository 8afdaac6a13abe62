package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/worker"
)

// paceLimiter is an in-memory limiter: one request every interval, in the
// order they ask, shared by the baseline's River clients (as one process's
// memory would be: the baseline needs no database to pace).
type paceLimiter struct {
	mu       sync.Mutex
	next     time.Time
	interval time.Duration
}

// wait sleeps until the caller's turn, or ctx ends.
func (l *paceLimiter) wait(ctx context.Context) error {
	l.mu.Lock()
	now := time.Now()
	at := l.next
	if at.Before(now) {
		at = now
	}
	l.next = at.Add(l.interval)
	l.mu.Unlock()
	t := time.NewTimer(at.Sub(now))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pacedSendWorker is SendWorker behind the in-memory limiter.
type pacedSendWorker struct {
	river.WorkerDefaults[SendArgs]
	client  *client.Client
	limiter *paceLimiter
}

// Work waits for the limiter, then sends the job's email.
func (w *pacedSendWorker) Work(ctx context.Context, job *river.Job[SendArgs]) error {
	if err := w.limiter.wait(ctx); err != nil {
		return err
	}
	_, err := w.client.Emails.Send(ctx, EmailParams(job.Args.To, job.Args.Order), client.WithIdempotencyKey(job.Args.Key))
	return err
}

// riverBaseline is the rate-limited drain's baseline: what a user would
// write instead of the fleet, s.workers River clients of MaxWorkers
// s.concurrency (each its own pool, the worker's FetchCooldown) whose
// jobs call the same client through one in-memory limiter at s.limit a
// second, against the same fake API. It returns the database's CPU per
// job, in µs, and the WAL written per job, in bytes.
//
// It is long because it is the baseline's setup, run and measurement in the
// order they happen, which reads best top to bottom.
func (s *RateLimited) riverBaseline(ctx context.Context, env *Env) (dbMicros, walBytes float64, err error) {
	if err := env.Reset(ctx); err != nil {
		return 0, 0, err
	}
	srv := fakeapi.New(fakeapi.Config{APIKeys: []string{APIKey}, Rate: []fakeapi.RateLimit{{Count: s.limit, Per: time.Second}}})
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		srv.Close()
		return 0, 0, fmt.Errorf("bench: river baseline: start fake API: %w", err)
	}
	defer srv.Close()
	c, err := client.New(client.WithAPIKey(APIKey), client.WithBaseURL(url))
	if err != nil {
		return 0, 0, fmt.Errorf("bench: river baseline: client: %w", err)
	}
	jobs := make([]river.InsertManyParams, s.n)
	for i := range jobs {
		jobs[i] = river.InsertManyParams{Args: SendArgs{Key: "rate-river:" + strconv.Itoa(i), To: Recipient(i), Order: i}}
	}
	if err := insertJobs(ctx, env.Admin, jobs); err != nil {
		return 0, 0, err
	}
	if err := env.Checkpoint(ctx); err != nil {
		return 0, 0, err
	}
	limiter := &paceLimiter{interval: time.Second / time.Duration(s.limit)}
	workers := river.NewWorkers()
	river.AddWorker(workers, &pacedSendWorker{client: c, limiter: limiter})
	done := make(chan *river.Event, s.n+1000)
	var clients []*river.Client[pgx.Tx]
	defer func() {
		for _, rc := range clients {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = rc.Stop(stopCtx)
			cancel()
		}
	}()
	wal0, err := env.ReadWAL(ctx)
	if err != nil {
		return 0, 0, err
	}
	cpu0 := env.ReadCPU()
	for range s.workers {
		pool, err := env.NewPool(ctx, env.PoolConns)
		if err != nil {
			return 0, 0, err
		}
		defer pool.Close()
		rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			Queues:        map[string]river.QueueConfig{RawQueue: {MaxWorkers: s.concurrency}},
			Workers:       workers,
			FetchCooldown: worker.DefaultFetchCooldown,
			Logger:        discard,
		})
		if err != nil {
			return 0, 0, fmt.Errorf("bench: river baseline: river client: %w", err)
		}
		events, unsubscribe := rc.SubscribeConfig(&river.SubscribeConfig{ChanSize: s.n + 1000, Kinds: finishedKinds})
		defer unsubscribe()
		go func() {
			for ev := range events {
				done <- ev
			}
		}()
		if err := rc.Start(ctx); err != nil {
			return 0, 0, fmt.Errorf("bench: river baseline: start: %w", err)
		}
		clients = append(clients, rc)
	}
	limit := time.After(time.Duration(4*s.n/s.limit)*time.Second + time.Minute)
	for completed := 0; completed < s.n; {
		select {
		case ev := <-done:
			if ev.Kind == river.EventKindJobCompleted {
				completed++
			}
		case <-limit:
			return 0, 0, fmt.Errorf("bench: river baseline: %d of %d jobs completed in time", completed, s.n)
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	cpu := env.ReadCPU().Sub(cpu0)
	wal, err := env.WALSince(ctx, wal0)
	if err != nil {
		return 0, 0, err
	}
	if delivered := len(srv.Deliveries()); delivered != s.n {
		return 0, 0, fmt.Errorf("bench: river baseline: %d jobs completed, but the fake delivered %d", s.n, delivered)
	}
	return float64(cpu.DB.Microseconds()) / float64(s.n), float64(wal) / float64(s.n), nil
}
