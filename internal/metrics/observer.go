package metrics

import "github.com/sendonce/sendonce/worker"

var _ worker.Observer = (*Metrics)(nil)

// Observe counts one attempt's outcome. It makes Metrics a worker.Observer:
// pass it as worker.SendConfig.Observer.
func (m *Metrics) Observe(o worker.Outcome) {
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
