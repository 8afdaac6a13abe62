package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/poison"
	"github.com/sendonce/sendonce/outbox"
)

// Trouble is scenario 8, a provider that misbehaves (issue 23), in two
// rows. Poison: one `sendonce work` with no --api-rate drains 1,000
// intents, once alone and once beside 2 poison intents whose every
// request the fake answers 429 with no Retry-After while it takes the
// others; the figure is the drain with them against the drain without, in
// the same run (it was 22× when each 429 cut the fleet's rate). Waiting:
// three `sendonce work --api-rate 2/s` processes with a backlog, 30 sends
// waiting for the budget most of the time; the figure is the database's
// CPU per second of waiting. Like scenario 6 it runs once per benchmark.
type Trouble struct {
	fleet   *RateLimited // the machinery: binary, processes, settling
	poison  *Row
	waiting *Row

	poisonRequests, poisonPending *Figure
	waitingSent                   *Figure
}

// poisonN is the ordinary intents of the poison row; waitingRate the
// waiting row's --api-rate, requests a second.
const (
	poisonN     = 1000
	waitingRate = 2
)

// NewTrouble returns scenario 8. binary is the sendonce binary to run;
// empty builds ./cmd/sendonce.
func NewTrouble(binary string) *Trouble {
	s := &Trouble{
		fleet:          &RateLimited{Binary: binary, n: poisonN, workers: 3, concurrency: 10},
		poisonRequests: &Figure{Name: "poison requests", Unit: Count},
		poisonPending:  &Figure{Name: "poison pending", Unit: Count},
		waitingSent:    &Figure{Name: "sent/s", Unit: Count},
	}
	s.poison = &Row{
		Scenario: "8. Provider trouble",
		Measure: fmt.Sprintf("time to drain %s intents beside 2 poison intents (429 for them, forever), 1 × `sendonce work --concurrency 10`, no `--api-rate`",
			Thousands(poisonN)),
		Unit:         Seconds,
		Baseline:     "the same drain without them",
		BaselineUnit: Seconds,
		RatioUnit:    Times,
		Also:         []*Figure{s.poisonRequests, s.poisonPending},
		Goal: Goal{Text: "≤ 1.5× the drain without them, both poison intents pending",
			Check: All(RatioAtMost(1.5), s.poisonPending.AtLeast(2))},
	}
	s.waiting = &Row{
		Scenario: "8. Provider trouble",
		Measure: fmt.Sprintf("database CPU per second, 3 × `sendonce work --concurrency 10 --api-rate %d/s` waiting for the budget (30 sends waiting, a backlog of 3,000), 20 s after 5 s",
			waitingRate),
		Unit: Micros,
		Also: []*Figure{s.waitingSent},
	}
	return s
}

// Name is "trouble".
func (s *Trouble) Name() string { return "trouble" }

// Rows are poison, then waiting.
func (s *Trouble) Rows() []*Row { return []*Row{s.poison, s.waiting} }

// Run measures both rows, on the first run only.
func (s *Trouble) Run(ctx context.Context, env *Env) error {
	f := s.fleet
	if f.ran {
		env.Logf("trouble: measured once per benchmark; skipping this run")
		return nil
	}
	f.ran = true
	bin, err := f.binary(ctx, env)
	if err != nil {
		return err
	}
	for _, m := range []struct {
		row *Row
		fn  func(context.Context, *Env, string) error
	}{{s.poison, s.drainPoison}, {s.waiting, s.measureWaiting}} {
		if err := m.fn(ctx, env, bin); err != nil {
			if ctx.Err() != nil {
				return err
			}
			env.Logf("trouble: %v", err)
			m.row.Err = err
		}
	}
	return nil
}

// drainPoison drains the ordinary intents alone, then beside the poison.
func (s *Trouble) drainPoison(ctx context.Context, env *Env, bin string) error {
	var spans [2]time.Duration
	for i, withPoison := range []bool{false, true} {
		if err := env.Reset(ctx); err != nil {
			return err
		}
		srv := fakeapi.New(fakeapi.Config{APIKeys: []string{APIKey}, Faults: poison.Faults(withPoison)})
		url, err := srv.Start("127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("bench: poison: %w", err)
		}
		defer srv.Close()
		ob, err := env.Outbox(env.Admin)
		if err != nil {
			return err
		}
		intents := Intents("ord", poisonN)
		if withPoison {
			intents = poison.Among(intents, func(i int) outbox.Intent {
				return outbox.Intent{Key: fmt.Sprintf("%s%d", poison.Prefix, i), Kind: outbox.KindEmail, Payload: Payload(poisonN + i)}
			})
		}
		if err := EnqueueBatches(ctx, env.Admin, ob, intents, 1000); err != nil {
			return fmt.Errorf("bench: poison: %w", err)
		}
		if err := env.Checkpoint(ctx); err != nil {
			return err
		}
		p, err := s.fleet.start(ctx, bin, env.URL, url, "", 0)
		if err != nil {
			return err
		}
		err = waitSent(ctx, env, p, poisonN, 3*time.Minute)
		_ = p.stop()
		if err != nil {
			return err
		}
		var tries int
		spans[i], tries = poison.DrainSpan(srv.Requests(), poison.Prefix)
		if withPoison {
			var pending int
			if err := env.Admin.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox WHERE idempotency_key LIKE 'poison:%' AND state = $1`,
				string(outbox.StatePending)).Scan(&pending); err != nil {
				return fmt.Errorf("bench: poison: %w", err)
			}
			s.poisonRequests.Value.Add(float64(tries))
			s.poisonPending.Value.Add(float64(pending))
			env.Logf("trouble: %s intents drained in %s alone, %s beside 2 poison intents (%.2f×); the poison intents: %d requests, %d pending",
				Thousands(poisonN), spans[0].Round(time.Millisecond), spans[1].Round(time.Millisecond), spans[1].Seconds()/spans[0].Seconds(), tries, pending)
		}
	}
	s.poison.Value.Add(spans[1].Seconds())
	s.poison.BaselineValue.Add(spans[0].Seconds())
	s.poison.Ratio.Add(spans[1].Seconds() / spans[0].Seconds())
	return nil
}

// measureWaiting starts three workers over a backlog at waitingRate and
// reads the database's CPU over 20 s, after 5 s.
func (s *Trouble) measureWaiting(ctx context.Context, env *Env, bin string) error {
	if err := env.Reset(ctx); err != nil {
		return err
	}
	srv := fakeapi.New(fakeapi.Config{APIKeys: []string{APIKey}})
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: waiting: %w", err)
	}
	defer srv.Close()
	ob, err := env.Outbox(env.Admin)
	if err != nil {
		return err
	}
	if err := EnqueueBatches(ctx, env.Admin, ob, Intents("wait", 3000), 1000); err != nil {
		return fmt.Errorf("bench: waiting: %w", err)
	}
	if err := env.Checkpoint(ctx); err != nil {
		return err
	}
	fleet := make([]*workProc, 3)
	defer func() {
		for _, p := range fleet {
			if p != nil {
				_ = p.stop()
			}
		}
	}()
	for i := range fleet {
		if fleet[i], err = s.fleet.start(ctx, bin, env.URL, url, fmt.Sprintf("%d/s", waitingRate), i); err != nil {
			return err
		}
	}
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return err
	}
	cpu0, sent0, t0 := env.ReadCPU(), len(srv.Requests()), time.Now()
	if err := sleepCtx(ctx, 20*time.Second); err != nil {
		return err
	}
	cpu, sent, elapsed := env.ReadCPU().Sub(cpu0), len(srv.Requests())-sent0, time.Since(t0)
	for i, p := range fleet {
		select {
		case err := <-p.exited:
			p.exited = nil
			return fmt.Errorf("bench: waiting: worker %d exited early (%v): %s", i, err, tail(p.logs.String(), 400))
		default:
		}
	}
	if cpu.DB == 0 {
		return errors.New("bench: waiting: the database's backends are not readable here")
	}
	perSecond := float64(cpu.DB.Microseconds()) / elapsed.Seconds()
	env.Logf("trouble: three workers waiting at %d/s: database CPU %s over %s (%.0f µs a second), %d requests sent meanwhile",
		waitingRate, cpu.DB.Round(time.Millisecond), elapsed.Round(time.Millisecond), perSecond, sent)
	s.waiting.Value.Add(perSecond)
	s.waitingSent.Value.Add(float64(sent) / elapsed.Seconds())
	return nil
}

// waitSent waits until n intents other than poison ones are sent, or the
// worker exits, or timeout.
func waitSent(ctx context.Context, env *Env, p *workProc, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-p.exited:
			p.exited = nil
			return fmt.Errorf("bench: the worker exited early (%v): %s", err, tail(p.logs.String(), 400))
		default:
		}
		var sent, failed int
		if err := env.Admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = $1), count(*) FILTER (WHERE state = $2)
			FROM sendonce_outbox WHERE idempotency_key NOT LIKE 'poison:%'`, string(outbox.StateSent), string(outbox.StateFailed)).Scan(&sent, &failed); err != nil {
			return fmt.Errorf("bench: count sent intents: %w", err)
		}
		if failed > 0 {
			return fmt.Errorf("bench: %d intents failed", failed)
		}
		if sent >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d of %d intents sent within %s", sent, n, timeout)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// sleepCtx waits d, or less if ctx ends first (as the bench's other waits,
// with time.After).
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Notes describe the measurement.
func (s *Trouble) Notes() []string {
	return []string{"**8. Provider trouble.** Measured once per benchmark. Poison: `go build ./cmd/sendonce`; " +
		Thousands(poisonN) + " intents are enqueued (not timed), then one `sendonce work --concurrency 10 --http-addr \"\"` " +
		"with no `--api-rate` drains them through the in-process fake API with no limit; then again, from an emptied " +
		"database, with 2 poison intents among them (at positions 300 and 700) that the fake answers 429 with no " +
		"Retry-After forever (fault rate_limit, key=poison:). Each drain is the span in the fake's request log from the " +
		"first ordinary request to the last ordinary one answered 2xx; the figure is the drain beside the poison intents, " +
		"the ratio against the drain without them in the same run. Issue 23 measured 22× before a 429 was told from a " +
		"fleet signal. Waiting: three `sendonce work --concurrency 10 --api-rate " + fmt.Sprint(waitingRate) + "/s` " +
		"processes over a backlog of 3,000 intents, so 30 sends wait for the budget; the database backends' CPU is read " +
		"over 20 s, from 5 s after the start, and divided by the time (µs of database CPU per second of waiting; the " +
		"few sends that go meanwhile are in it)."}
}

// Close removes the built binary.
func (s *Trouble) Close() error { return s.fleet.Close() }
