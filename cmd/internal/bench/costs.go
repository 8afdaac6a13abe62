package bench

import (
	"fmt"
	"time"
)

// ClientBaseline names the drains' second baseline: what a user would write
// instead of the outbox (DrainRiverClient).
const ClientBaseline = "River job + same client call, no outbox"

// costs are the figures a drain's row shows beside its rate: the database
// backends' CPU and the WAL written, per job. Rates alone flatter whatever
// spends the database's CPU where the benchmark cannot see it; these are
// what a path costs the database, however fast the machine.
type costs struct {
	cpu, wal *Figure
}

// newCosts returns the two figures, their names prefixed by whose they are
// ("" for the row's own value).
func newCosts(whose, per string) costs {
	if whose != "" {
		whose += " "
	}
	return costs{
		cpu: &Figure{Name: whose + "DB CPU/" + per, Unit: Micros},
		wal: &Figure{Name: whose + "WAL/" + per, Unit: Bytes},
	}
}

// figures are the two, for a row's Also.
func (c costs) figures() []*Figure { return []*Figure{c.cpu, c.wal} }

// add records one drain's costs. The database's CPU is left out when it
// could not be read (a server on another machine).
func (c costs) add(r DrainResult) {
	if r.CPU.DB > 0 {
		c.cpu.Value.Add(micros(r.CPUPerJob().DB))
	}
	c.wal.Value.Add(r.WALPerJob())
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// versusClient is a row comparing a drain with a baseline measured in the
// same run, the River + client drain but for newVersus's: the rate of each and its ratio, the
// baseline's costs (or the compared drain's own: see newVersusOwn) and the
// ratio of the database CPU per intent.
type versusClient struct {
	row   *Row
	shown costs
	// own says shown are the compared drain's costs, not the baseline's.
	own      bool
	cpuRatio *Figure
}

// newVersusClient returns the row, showing the baseline's costs; its goal,
// if any, is set by the caller.
func newVersusClient(scenario, measure string) *versusClient {
	return newVersus(scenario, measure, ClientBaseline, "River + client", newCosts("River + client", "intent"), false)
}

// newVersusOwn returns the row, showing the compared drain's own costs per
// job.
func newVersusOwn(scenario, measure string) *versusClient {
	return newVersus(scenario, measure, ClientBaseline, "River + client", newCosts("", "job"), true)
}

// newVersus returns a row comparing a drain with baseline (short: its
// name in the CPU ratio's), showing shown (the compared drain's costs
// when own).
func newVersus(scenario, measure, baseline, short string, shown costs, own bool) *versusClient {
	v := &versusClient{
		shown:    shown,
		own:      own,
		cpuRatio: &Figure{Name: "DB CPU ÷ " + short, Unit: Times},
	}
	v.row = &Row{
		Scenario:     scenario,
		Measure:      measure,
		Unit:         PerSecond,
		Baseline:     baseline,
		BaselineUnit: PerSecond,
		RatioUnit:    Times,
		Also:         append(v.shown.figures(), v.cpuRatio),
	}
	return v
}

// add records one run, and returns the two ratios (rate, database CPU) for
// the log; the CPU ratio is NaN when the database's CPU was not read.
func (v *versusClient) add(full, base DrainResult) (rate, cpu float64) {
	rate = full.Rate() / base.Rate()
	v.row.Value.Add(full.Rate())
	v.row.BaselineValue.Add(base.Rate())
	v.row.Ratio.Add(rate)
	if v.own {
		v.shown.add(full)
	} else {
		v.shown.add(base)
	}
	cpu = float64(full.CPUPerJob().DB) / float64(base.CPUPerJob().DB)
	if base.CPUPerJob().DB > 0 && full.CPU.DB > 0 {
		v.cpuRatio.Value.Add(cpu)
	}
	return rate, cpu
}

// ratios renders the two ratios for a log line.
func ratios(rate, cpu float64) string {
	return fmt.Sprintf("full path ÷ River + client: rate %s, DB CPU per intent %s", Times.Format(rate), Times.Format(cpu))
}
