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
// is the measured rate over that ideal. Each cell also drains River +
// client (DrainRiverClient) against the same slow API: a user's River job
// waits on the API as long, so the ratio to it is the outbox's own cost
// when the API, not the database, sets the pace.
type LatencyBound struct {
	cells          []*latencyCell
	warmup, window time.Duration
	poolConns      int
	runs           int
}

type latencyCell struct {
	p        DrainParams
	row      *Row
	full     costs
	vsClient *versusClient
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
			cell := &latencyCell{
				p:        DrainParams{N: n, Concurrency: c, Latency: lat, Warmup: s.warmup, Window: s.window},
				row:      row,
				full:     newCosts("", "intent"),
				vsClient: newVersusClient(row.Scenario, row.Measure+", vs River + client"),
			}
			row.Also = cell.full.figures()
			s.cells = append(s.cells, cell)
		}
	}
	return s
}

// maxBacklog caps the intents enqueued for one cell.
const maxBacklog = 12_000

// Name is "latency".
func (s *LatencyBound) Name() string { return "latency" }

// Rows are two per cell: against the ideal, and against River + client.
func (s *LatencyBound) Rows() []*Row {
	var rows []*Row
	for _, c := range s.cells {
		rows = append(rows, c.row, c.vsClient.row)
	}
	return rows
}

// Run drains every cell once through the outbox and once through River +
// client, in alternating order from run to run. A failing cell marks its
// own rows and the others go on.
func (s *LatencyBound) Run(ctx context.Context, env *Env) error {
	s.poolConns = env.PoolConns
	first := s.runs % 2
	s.runs++
	for _, c := range s.cells {
		var res [2]DrainResult
		drains := [2]func(context.Context, *Env, DrainParams) (DrainResult, error){DrainOutbox, DrainRiverClient}
		var err error
		for i := range drains {
			j := (first + i) % 2
			if res[j], err = drains[j](ctx, env, c.p); err != nil {
				break
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			env.Logf("latency %s c=%d: %v", c.p.Latency, c.p.Concurrency, err)
			c.row.Err, c.vsClient.row.Err = err, err
			continue
		}
		full, cli := res[0], res[1]
		ideal := float64(c.p.Concurrency) / c.p.Latency.Seconds()
		rate, cpu := c.vsClient.add(full, cli)
		env.Logf("latency %s c=%d: full path %s, %.0f%% of ideal %s/s; River + client %s; %s", c.p.Latency, c.p.Concurrency,
			full, 100*full.Rate()/ideal, Thousands(ideal), cli, ratios(rate, cpu))
		c.full.add(full)
		c.row.Value.Add(full.Rate())
		c.row.Ratio.Add(full.Rate() / ideal)
	}
	return nil
}

// Notes describe the measurement.
func (s *LatencyBound) Notes() []string {
	return []string{fmt.Sprintf("**2. Latency-bound drain.** As scenario 1, but the fake API sleeps a fixed latency before "+
		"handling each request (its `latency` fault), and the worker runs with its defaults but for the concurrency "+
		"(fetch cooldown %s, pool of %d). The rate is the steady one: jobs completed between %s and %s after the worker "+
		"starts, over those %s, from a backlog big enough not to run dry at the ideal rate (at most %s intents). "+
		"Ideal = concurrency ÷ latency; efficiency = measured ÷ ideal. Each cell's second row compares the same drain, "+
		"in the same run and one after the other (the order alternates from run to run), with %s (River + client, as in "+
		"scenario 1) draining as big a backlog against the same fake API with the same latency, concurrency, fetch cooldown "+
		"and pool, measured over the same window; DB CPU/intent and WAL/intent are per job completed in the window.",
		worker.DefaultFetchCooldown, s.poolConns, s.warmup, s.warmup+s.window, s.window, Thousands(maxBacklog), ClientBaseline)}
}
