package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Commits is scenario 0, the machine's yardstick: how many single-row
// UPDATE transactions PostgreSQL commits per second, on one connection and
// on several. Every other figure here is bound by commits or by the CPU
// that they and the worker share, so this row says how this machine
// compares with another (shared/river-notes.md measured about 3,500/s on
// one connection and 18,000/s on 32 on its machine).
type Commits struct {
	conns []int
	dur   time.Duration
	rows  []*Row
}

// NewCommits returns scenario 0; quick measures for less time.
func NewCommits(quick bool) *Commits {
	s := &Commits{conns: []int{1, 16}, dur: 2 * time.Second}
	if quick {
		s.dur = time.Second
	}
	for _, c := range s.conns {
		s.rows = append(s.rows, &Row{
			Scenario: "0. PostgreSQL",
			Measure:  fmt.Sprintf("single-row UPDATE commits, %d connection%s (the machine's yardstick)", c, plural(c)),
			Unit:     PerSecond,
		})
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Name is "commits".
func (s *Commits) Name() string { return "commits" }

// Rows are one per connection count.
func (s *Commits) Rows() []*Row { return s.rows }

// Run measures every connection count once.
func (s *Commits) Run(ctx context.Context, env *Env) error {
	if _, err := env.Admin.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_commits (id int PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO bench_commits SELECT g, 0 FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING`); err != nil {
		return fmt.Errorf("bench: commits table: %w", err)
	}
	if err := env.Checkpoint(ctx); err != nil {
		return err
	}
	for i, conns := range s.conns {
		pool, err := env.NewPool(ctx, conns)
		if err != nil {
			return err
		}
		var done atomic.Int64
		var firstErr error
		var once sync.Once
		runCtx, cancel := context.WithTimeout(ctx, s.dur)
		var wg sync.WaitGroup
		for c := range conns {
			wg.Go(func() {
				for k := 0; runCtx.Err() == nil; k++ {
					// Each connection updates rows of its own, so the figure is
					// commits, not row-lock waits.
					id := 1 + (c*50+k%50)%1000
					if _, err := pool.Exec(runCtx, "UPDATE bench_commits SET n = n + 1 WHERE id = $1", id); err != nil {
						if runCtx.Err() == nil {
							once.Do(func() { firstErr = err })
						}
						return
					}
					done.Add(1)
				}
			})
		}
		wg.Wait()
		cancel()
		pool.Close()
		if firstErr != nil {
			return fmt.Errorf("bench: commits: %w", firstErr)
		}
		rate := Rate(int(done.Load()), s.dur)
		env.Logf("commits: %d connection(s): %s/s", conns, Thousands(rate))
		s.rows[i].Value.Add(rate)
	}
	return nil
}

// Notes describe the measurement.
func (s *Commits) Notes() []string {
	return []string{fmt.Sprintf("**0. PostgreSQL.** The machine's yardstick: autocommit `UPDATE … SET n = n + 1 WHERE id = $1` "+
		"on a small table for %s, each connection on rows of its own. shared/river-notes.md measured ≈ 3,500/s on one "+
		"connection and ≈ 13,700–18,000/s on 8–32 on its machine. Figures below that wait on commits (the latency-bound "+
		"drain at low concurrency, the enqueue at one intent per transaction, the end-to-end latency) move with this one.", s.dur)}
}
