package bench

import (
	"context"
	"fmt"
	"time"
)

// Hook is scenario 12: what a status hook (worker.Config.OnStatus) that
// does one UPDATE of the application's table costs the drain: the drain
// of scenario 1 with the hook and without it, alternated, in each run.
// The bound: at most one statement more per intent per transition,
// and no transaction more.
type Hook struct {
	p                     DrainParams
	cost                  *versusClient
	stmts, commits        *Figure // with the hook, per intent
	baseStmts, baseCommit *Figure // without, per intent
	addStmts, addCommits  *Figure // added by the hook, per intent
	runs                  int
}

// NewHook returns scenario 12; quick drains 5,000 intents.
func NewHook(quick bool) *Hook {
	p := DrainParams{N: 20_000, Concurrency: 500, FetchCooldown: 10 * time.Millisecond, Hook: true}
	if quick {
		p.N = 5_000
	}
	s := &Hook{p: p}
	s.cost = newVersus("12. Status hook",
		fmt.Sprintf("drain of %s intents, full path, concurrency %d, fetch cooldown %s, with `OnStatus` doing one UPDATE of the application's table per call (each sent intent's row: emailed_at, emailed + 1), vs the same drain without it",
			Thousands(float64(p.N)), p.Concurrency, p.FetchCooldown),
		"the same drain without a hook", "no hook", newCosts("", "intent"), true)
	s.stmts = &Figure{Name: "statements/intent", Unit: Hundredths}
	s.baseStmts = &Figure{Name: "without: statements/intent", Unit: Hundredths}
	s.addStmts = &Figure{Name: "statements added/intent", Unit: Hundredths}
	s.commits = &Figure{Name: "transactions/intent", Unit: Hundredths}
	s.baseCommit = &Figure{Name: "without: transactions/intent", Unit: Hundredths}
	s.addCommits = &Figure{Name: "transactions added/intent", Unit: Hundredths}
	s.cost.row.Also = append(s.cost.row.Also, s.stmts, s.baseStmts, s.addStmts, s.commits, s.baseCommit, s.addCommits)
	// The transactions are shown, not checked: how many rounds a drain
	// makes varies with its pace, and the hook runs in the mark's own
	// transaction by construction (TestStatusHookAddsNoTransaction).
	s.cost.row.Goal = Goal{Text: "≤ 1 statement added per intent (one transition each: sent), in the mark's transaction", Check: s.addStmts.AtMost(1)}
	return s
}

// Name is "hook".
func (s *Hook) Name() string { return "hook" }

// Rows is the one row.
func (s *Hook) Rows() []*Row { return []*Row{s.cost.row} }

// Run drains with the hook and without, in an order that alternates from
// run to run.
func (s *Hook) Run(ctx context.Context, env *Env) error {
	without := s.p
	without.Hook = false
	var with, base DrainResult
	drains := []struct {
		name string
		res  *DrainResult
		p    DrainParams
	}{{"with the hook", &with, s.p}, {"without", &base, without}}
	for i := range drains {
		dr := drains[(i+s.runs)%len(drains)]
		counting := env.resetStatements(ctx)
		var err error
		if *dr.res, err = DrainOutbox(ctx, env, dr.p); err != nil {
			s.cost.row.Err = fmt.Errorf("%s: %w", dr.name, err)
			return nil
		}
		if counting {
			env.Logf("hook, %s: per intent, %s", dr.name, env.topStatements(ctx, 12, float64(dr.p.N)))
		}
	}
	s.runs++
	rate, cpu := s.cost.add(with, base)
	n := float64(s.p.N)
	if with.Statements >= 0 && base.Statements >= 0 {
		s.stmts.Value.Add(float64(with.Statements) / n)
		s.baseStmts.Value.Add(float64(base.Statements) / n)
		s.addStmts.Value.Add(float64(with.Statements-base.Statements) / n)
	}
	s.commits.Value.Add(float64(with.Commits) / n)
	s.baseCommit.Value.Add(float64(base.Commits) / n)
	s.addCommits.Value.Add(float64(with.Commits-base.Commits) / n)
	env.Logf("hook: with %s (%d statements, %d transactions), without %s (%d statements, %d transactions); rate %s, DB CPU per intent %s",
		with, with.Statements, with.Commits, base, base.Statements, base.Commits, Times.Format(rate), Times.Format(cpu))
	return nil
}

// Notes say how it is measured.
func (s *Hook) Notes() []string {
	return []string{fmt.Sprintf("**12. Status hook.** Scenario 1's drain (%s intents, concurrency %d) twice in each run, the order "+
		"alternating: with `worker.Config.OnStatus` set to a hook that runs `UPDATE %s SET emailed_at = now(), emailed = emailed + 1 "+
		"WHERE key = ANY($1)` with the keys it is told were sent (a table of one row per intent, made before the drain and not "+
		"timed; after the drain each row must have been updated exactly once, or the run fails), and without. Statements are "+
		"pg_stat_statements' calls in the benchmark database, transactions pg_stat_database's xact_commit (read after the "+
		"worker's pool has closed, so that every backend has reported its own), from the drain's start to its end, per intent.",
		Thousands(float64(s.p.N)), s.p.Concurrency, HookTable)}
}
