package bench

import "context"

// Scenario is one benchmark of the table. The runner calls Run once per
// run (all scenarios in turn, run after run, so slow drift of the machine
// spreads over all of them), then reads Rows and Notes.
type Scenario interface {
	// Name is the short name -only selects it by.
	Name() string
	// Run measures once and records the figures in the scenario's rows.
	Run(ctx context.Context, env *Env) error
	// Rows are the scenario's rows of the table. They are the same rows
	// throughout, filled in run after run.
	Rows() []*Row
	// Notes say how the figures were measured, for BENCHMARKS.md.
	Notes() []string
}

// Fail marks every row of s with err, unless a row already has an error.
func Fail(s Scenario, err error) {
	for _, r := range s.Rows() {
		if r.Err == nil {
			r.Err = err
		}
	}
}
