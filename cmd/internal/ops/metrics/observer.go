package metrics

import "github.com/sendonce/sendonce/worker"

var _ worker.Observer = (*Metrics)(nil)

// Observe counts one attempt's outcome. It makes Metrics a worker.Observer:
// pass it as worker.SendConfig.Observer.
func (m *Metrics) Observe(o worker.Outcome) {
	switch o.Result {
	case worker.ResultBudgetToken:
		m.budgetWait.Observe(o.BudgetWait.Seconds())
		return
	case worker.ResultBudgetSnoozed:
		m.budgetWait.Observe(o.BudgetWait.Seconds())
		m.budgetSnoozes.Inc()
		return
	case worker.ResultRateLimited:
		m.rateLimited.Inc()
		return
	}
	m.sends.WithLabelValues(string(o.Kind), string(o.Result)).Inc()
	switch o.Result {
	case worker.ResultReplayed:
		m.replays.Inc()
	case worker.ResultRetry:
		m.retries.Inc()
	}
	if o.APILatency > 0 {
		m.callDuration.WithLabelValues(string(o.Kind)).Observe(o.APILatency.Seconds())
	}
}
