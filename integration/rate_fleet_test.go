package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// rateFleet is one drain of a rate-limited fleet: three `sendonce work`
// processes on a database of their own, against a fake API that allows
// limit requests a second.
type rateFleet struct {
	srv     *fakeapi.Server
	pool    *pgxpool.Pool
	ledger  ledger
	reqs    []fakeapi.RequestRecord
	first   time.Time // the first request
	refused int       // requests answered 429
	// accepted and span (seconds from the first request to the last)
	// measure use: the accepted requests over the budget of the span
	// (limit·span + limit: the fake's bucket starts full).
	accepted int
	span     float64
	use      float64
	// share is the refused requests over all.
	share float64
}

// drainRateLimited enqueues intents into a new database (named after
// label), drains them with three workers started with opts against srv
// within the timeout (no intent may be parked failed under a rate limit),
// stops the workers, checks the fake's ledger for exactly once, and
// measures the requests against limit.
func drainRateLimited(t *testing.T, srv *fakeapi.Server, label string, intents []intent, opts workerOptions, within time.Duration, limit float64) rateFleet {
	t.Helper()
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), label)
	e := processEnv(dbURL, srv)
	enqueueGo(t, pool, intents)
	workers := make([]*proc, 3)
	for i := range workers {
		workers[i] = startWorker(t, fmt.Sprintf("worker%d", i), e, opts)
	}
	waitFor(t, within, "every intent sent", func() (bool, string) {
		o, err := outboxStates(context.Background(), pool)
		if o["failed"] > 0 {
			t.Fatalf("%d intents parked failed under a rate limit", o["failed"])
		}
		return err == nil && o["sent"] == len(intents), fmt.Sprint(o, err)
	})
	for _, w := range workers {
		w.stop(t)
	}
	f := rateFleet{srv: srv, pool: pool, ledger: checkExactlyOnce(t, srv, pool, intents), reqs: srv.Requests(), refused: srv.RateLimited()}
	first, last := srv.RequestSpan()
	f.first = first
	f.accepted = len(f.reqs) - f.refused
	f.span = last.Sub(first).Seconds()
	f.use = float64(f.accepted) / (limit*f.span + limit)
	f.share = float64(f.refused) / float64(len(f.reqs))
	return f
}
