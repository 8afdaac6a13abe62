package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sendonce/sendonce/worker"
)

// LatencyBound is scenario 2: a worker draining against an API that takes
// a fixed time per request, where throughput should approach the ideal of
// concurrency ÷ latency (every slot always waiting on the API). Efficiency
// is the measured rate over that ideal.
type LatencyBound struct {
	cells          []*latencyCell
	warmup, window time.Duration
	poolConns      int
}

type latencyCell struct {
	p   DrainParams
	row *Row
}

// Latencies and concurrencies of scenario 2's cells.
var (
	BoundLatencies    = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond}
	BoundConcurrences = []int{10, 100, 500}
)

// NewLatencyBound returns scenario 2; quick runs each cell for less time.
func NewLatencyBound(quick bool) *LatencyBound {
	s := &LatencyBound{warmup: time.Second, window: 3 * time.Second}
	if quick {
		s.warmup, s.window = 500*time.Millisecond, time.Second
	}
	for _, lat := range BoundLatencies {
		for _, c := range BoundConcurrences {
			ideal := float64(c) / lat.Seconds()
			// Enough intents that the queue cannot run dry before the
			// window ends even at the ideal rate, within reason: past
			// maxBacklog the cell is bound by throughput anyway.
			n := int(1.1*ideal*(s.warmup+s.window).Seconds()) + c
			n = min(n, maxBacklog)
			row := &Row{
				Scenario:     "2. Latency-bound",
				Measure:      fmt.Sprintf("latency %s, concurrency %d", lat, c),
				Unit:         PerSecond,
				Baseline:     "ideal " + PerSecond.Format(ideal),
				BaselineUnit: PerSecond,
				RatioUnit:    Percent,
			}
			if c == 100 {
				row.Goal = Goal{Text: "≥ 90% of ideal", Check: RatioAtLeast(0.9)}
			}
			s.cells = append(s.cells, &latencyCell{
				p:   DrainParams{N: n, Concurrency: c, Latency: lat, Warmup: s.warmup, Window: s.window},
				row: row,
			})
		}
	}
	return s
}

// maxBacklog caps the intents enqueued for one cell.
const maxBacklog = 12_000

// Name is "latency".
func (s *LatencyBound) Name() string { return "latency" }

// Rows are one per cell.
func (s *LatencyBound) Rows() []*Row {
	rows := make([]*Row, len(s.cells))
	for i, c := range s.cells {
		rows[i] = c.row
	}
	return rows
}

// Run drains every cell once. A failing cell marks its own row and the
// others go on.
func (s *LatencyBound) Run(ctx context.Context, env *Env) error {
	s.poolConns = env.PoolConns
	for _, c := range s.cells {
		res, err := DrainOutbox(ctx, env, c.p)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			env.Logf("latency %s c=%d: %v", c.p.Latency, c.p.Concurrency, err)
			c.row.Err = err
			continue
		}
		ideal := float64(c.p.Concurrency) / c.p.Latency.Seconds()
		cpu := res.CPUPerJob()
		env.Logf("latency %s c=%d: %s/s of ideal %s/s (%.0f%%); CPU per intent: process %s, database %s", c.p.Latency, c.p.Concurrency,
			Thousands(res.Rate()), Thousands(ideal), 100*res.Rate()/ideal, cpu.Self.Round(time.Microsecond), cpu.DB.Round(time.Microsecond))
		c.row.Value.Add(res.Rate())
		c.row.Ratio.Add(res.Rate() / ideal)
	}
	return nil
}

// Notes describe the measurement.
func (s *LatencyBound) Notes() []string {
	return []string{fmt.Sprintf("**2. Latency-bound drain.** As scenario 1, but the fake API sleeps a fixed latency before "+
		"handling each request (its `latency` fault), and the worker runs with its defaults but for the concurrency "+
		"(fetch cooldown %s, pool of %d). The rate is the steady one: jobs completed between %s and %s after the worker "+
		"starts, over those %s, from a backlog big enough not to run dry at the ideal rate (at most %s intents). "+
		"Ideal = concurrency ÷ latency; efficiency = measured ÷ ideal.",
		worker.DefaultFetchCooldown, s.poolConns, s.warmup, s.warmup+s.window, s.window, Thousands(maxBacklog))}
}
