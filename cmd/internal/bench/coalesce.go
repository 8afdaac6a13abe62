package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
)

// Coalesced is scenario 7: the billing run that coalescing exists for. A
// fleet of three `sendonce work --coalesce 100` processes drains 10,000
// email intents through an API that allows 10 requests a second per API key
// (429, no Retry-After, beyond that), with the limit configured
// (--api-rate 10/s). One email per request, that is 1,000 s; the goal is
// every email sent within 15 s, at 66 or more emails per request on
// average, and each delivered exactly once under the batch key its row
// names. Like scenario 6 it runs once per benchmark.
type Coalesced struct {
	fleet *RateLimited // the fleet's machinery: binary, processes, settling
	row   *Row

	requests, perRequest, refused, duplicates *Figure
}

// NewCoalesced returns scenario 7; quick drains 2,000 intents.
func NewCoalesced(quick bool, binary string) *Coalesced {
	n := 10_000
	if quick {
		n = 2_000
	}
	s := &Coalesced{
		fleet:      &RateLimited{Binary: binary, n: n, workers: 3, concurrency: 100, limit: 10, extra: []string{"--coalesce", "100"}},
		requests:   &Figure{Name: "requests", Unit: Count},
		perRequest: &Figure{Name: "emails/request", Unit: Count},
		refused:    &Figure{Name: "429s", Unit: Count},
		duplicates: &Figure{Name: "duplicates", Unit: Count},
	}
	s.row = &Row{
		Scenario: "7. Coalesced drain",
		Measure: fmt.Sprintf("time to send %s email intents, 3 × `sendonce work --coalesce 100 --api-rate 10/s`, API limit 10/s per key",
			Thousands(float64(n))),
		Unit:         Seconds,
		Baseline:     "one email per request at 10/s",
		BaselineUnit: Seconds,
		RatioUnit:    Times,
		Also:         []*Figure{s.requests, s.perRequest, s.refused, s.duplicates},
		Goal: Goal{Text: "≤ 15 s, ≥ 66 emails per request, 0 duplicates",
			Check: All(AtMost(15), s.perRequest.AtLeast(66), s.duplicates.AtMost(0))},
	}
	return s
}

// Name is "coalesce".
func (s *Coalesced) Name() string { return "coalesce" }

// Rows is the one row.
func (s *Coalesced) Rows() []*Row { return []*Row{s.row} }

// Run drains once per benchmark.
func (s *Coalesced) Run(ctx context.Context, env *Env) error {
	f := s.fleet
	if f.ran {
		env.Logf("coalesce: measured once per benchmark; skipping this run")
		return nil
	}
	f.ran = true
	bin, err := f.binary(ctx, env)
	if err != nil {
		return err
	}
	if err := s.drain(ctx, env, bin); err != nil {
		if ctx.Err() != nil {
			return err
		}
		env.Logf("coalesce: %v", err)
		s.row.Err = err
	}
	return nil
}

func (s *Coalesced) drain(ctx context.Context, env *Env, bin string) error {
	f := s.fleet
	srv, url, _, err := f.backlog(ctx, env, "coalesce")
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := env.Checkpoint(ctx); err != nil {
		return err
	}

	t0 := time.Now()
	fleet, stopAll, err := f.startFleet(ctx, bin, env.URL, url, fmt.Sprintf("%d/s", f.limit))
	if err != nil {
		return err
	}
	defer stopAll()
	failed, _, err := f.waitSettled(ctx, env, nil, fleet)
	elapsed := time.Since(t0)
	for _, p := range fleet {
		_ = p.stop()
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("bench: %d intents failed", failed)
	}

	batches, refused := 0, srv.RateLimited()
	for _, r := range srv.Requests() {
		if r.Path == "/emails/batch" && !r.RateLimited && r.Status == 200 {
			batches++
		}
	}
	dups, err := s.check(ctx, env, srv)
	if err != nil {
		return err
	}
	perRequest := float64(f.n) / float64(max(batches, 1))
	env.Logf("coalesce: %s intents sent in %s: %d batch requests accepted (%.1f emails each), %d refused with 429, duplicates %d",
		Thousands(float64(f.n)), elapsed.Round(time.Millisecond), batches, perRequest, refused, dups)
	s.row.Value.Add(elapsed.Seconds())
	s.row.BaselineValue.Add(float64(f.n) / float64(f.limit))
	s.row.Ratio.Add(float64(f.n) / float64(f.limit) / elapsed.Seconds())
	s.requests.Value.Add(float64(len(srv.Requests())))
	s.perRequest.Value.Add(perRequest)
	s.refused.Value.Add(float64(refused))
	s.duplicates.Value.Add(float64(dups))
	return nil
}

// check compares the fake's deliveries with the outbox: each intent's
// recipient delivered exactly once, under the batch key (or own key) its
// row names. A duplicate or a lost email is an error.
func (s *Coalesced) check(ctx context.Context, env *Env, srv *fakeapi.Server) (duplicates int, err error) {
	rows, err := env.Admin.Query(ctx, `SELECT payload->'to'->>0, coalesce(batch_key, idempotency_key) FROM sendonce_outbox WHERE state = 'sent'`)
	if err != nil {
		return 0, fmt.Errorf("bench: read sent intents: %w", err)
	}
	keyOf := map[string]string{}
	for rows.Next() {
		var to, key string
		if err := rows.Scan(&to, &key); err != nil {
			rows.Close()
			return 0, err
		}
		keyOf[strings.ToLower(to)] = key
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	got := map[string]int{}
	wrong := 0
	for _, d := range srv.Deliveries() {
		to := strings.ToLower(d.To[0])
		got[to]++
		if got[to] > 1 {
			duplicates++
		}
		if keyOf[to] != d.IdempotencyKey {
			wrong++
		}
	}
	lost := 0
	for to := range keyOf {
		if got[to] == 0 {
			lost++
		}
	}
	if duplicates > 0 || lost > 0 || wrong > 0 || len(keyOf) != s.fleet.n {
		return duplicates, fmt.Errorf("bench: EXACTLY-ONCE BROKEN: %d duplicate deliveries, %d sent but never delivered, %d under another key than the row names, %d of %d sent",
			duplicates, lost, wrong, len(keyOf), s.fleet.n)
	}
	return 0, nil
}

// Notes say how scenario 7 was measured.
func (s *Coalesced) Notes() []string {
	f := s.fleet
	return []string{fmt.Sprintf("**7. Coalesced drain.** Measured once per benchmark. `go build ./cmd/sendonce`; %s email "+
		"intents are enqueued (not timed); then %d `sendonce work --coalesce 100 --api-rate %d/s --concurrency %d "+
		"--http-addr \"\"` processes, with the command's default timings (--coalesce-wait 200ms), drain them through the "+
		"in-process fake API, which allows %d requests a second per API key (429, no Retry-After, beyond that). The "+
		"figure is the time from starting the fleet until every intent is sent; the baseline is what one email per "+
		"request takes at the limit (%s s). Emails/request = intents ÷ accepted batch requests. Every intent's "+
		"recipient must have been delivered exactly once, under the batch key its row names: a duplicate, a loss or a "+
		"delivery under another key turns the row into an error.",
		Thousands(float64(f.n)), f.workers, f.limit, f.concurrency, f.limit, Thousands(float64(f.n/f.limit)))}
}

// Close removes the built binary.
func (s *Coalesced) Close() error { return s.fleet.Close() }
