package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sendonce/sendonce/outbox"
	"github.com/sendonce/sendonce/worker"
)

// Namespace prefixes every metric of this package.
const Namespace = "sendonce"

// Results lists the send results counted, in the order the worker's
// documentation gives them.
var Results = []worker.Result{
	worker.ResultSent, worker.ResultReplayed, worker.ResultRetry, worker.ResultSnoozed,
	worker.ResultFailed, worker.ResultExpired, worker.ResultSkipped,
}

// Kinds lists the intent kinds counted.
var Kinds = []outbox.Kind{outbox.KindEmail, outbox.KindBatch, outbox.KindTemplate, outbox.KindBroadcast}

// apiBuckets spans one HTTP attempt to the API: a fast answer in
// milliseconds up to the 30 s attempt timeout and a little beyond.
var apiBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// callBuckets spans one client call, its retries and their waits included,
// up to the 5 min job timeout.
var callBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Metrics is the set of collectors of one worker process, in a registry of
// its own. Make it with New. It is safe for concurrent use.
type Metrics struct {
	// Registry holds every collector of this package, and the Go runtime and
	// process collectors. Register more of your own on it if you like.
	Registry *prometheus.Registry

	sends        *prometheus.CounterVec
	replays      prometheus.Counter
	retries      prometheus.Counter
	callDuration *prometheus.HistogramVec

	apiRequests *prometheus.CounterVec
	apiDuration *prometheus.HistogramVec
	apiErrors   *prometheus.CounterVec

	budgetWait    prometheus.Histogram
	budgetSnoozes prometheus.Counter
	rateLimited   prometheus.Counter

	unsubscribes *prometheus.CounterVec
}

// New makes the collectors and registers them, with the Go runtime and
// process collectors, on a new registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "sends_total",
			Help:      "Attempts to send an intent, by kind and result (sent, replayed, retry, snoozed, failed, expired, skipped).",
		}, []string{"kind", "result"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "replays_total",
			Help:      "Sends the API answered from its idempotency record: an earlier attempt had already delivered.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "retries_total",
			Help:      "Attempts that failed for now and will be tried again (the client's own retries are in sendonce_api_requests_total).",
		}),
		callDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "api_call_duration_seconds",
			Help:      "Duration of one send call to the OpenEmail API by kind, the client's retries and their waits included.",
			Buckets:   callBuckets,
		}, []string{"kind"}),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "api_requests_total",
			Help:      "HTTP requests to the OpenEmail API that got a response, by method and status code; each retry counts.",
		}, []string{"method", "code"}),
		apiDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "api_request_duration_seconds",
			Help:      "Duration of one HTTP request to the OpenEmail API, until the response headers, by method.",
			Buckets:   apiBuckets,
		}, []string{"method"}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "api_request_errors_total",
			Help:      "HTTP requests to the OpenEmail API that got no response (connection failed, timed out, cancelled), by method.",
		}, []string{"method"}),
		budgetWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "budget_wait_seconds",
			Help:      "How long a send waited for a token of the fleet's send budget before claiming its intent.",
			Buckets:   []float64{.001, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		budgetSnoozes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "budget_snoozes_total",
			Help:      "Sends put off because no token of the send budget came in time (no attempt was made).",
		}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "rate_limited_total",
			Help:      "Sends the API answered with 429; each slows the whole fleet down.",
		}),
		unsubscribes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "unsubscribes_total",
			Help:      "Addresses unsubscribed from a topic by this process's unsubscribe endpoint, by topic and source (one-click, page); a repeated unsubscribe is not counted.",
		}, []string{"topic", "source"}),
	}
	// Every kind and result starts at zero, so a rate() over a result that
	// has not happened yet is 0 rather than absent.
	for _, k := range Kinds {
		m.callDuration.WithLabelValues(string(k))
		for _, r := range Results {
			m.sends.WithLabelValues(string(k), string(r))
		}
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.sends, m.replays, m.retries, m.callDuration,
		m.apiRequests, m.apiDuration, m.apiErrors,
		m.budgetWait, m.budgetSnoozes, m.rateLimited,
		m.unsubscribes,
	)
	return m
}

// Unsubscribed counts an address newly unsubscribed from topic by the
// unsubscribe endpoint, by source (one-click, page): the counted function
// of unsubscribe.New. The counter has no series until the first one.
func (m *Metrics) Unsubscribed(topic, source string) {
	m.unsubscribes.WithLabelValues(topic, source).Inc()
}

// Handler serves the registry in the Prometheus exposition format.
// Collection errors (none are expected: the outbox collector reports nothing
// rather than fail) are served as a 500.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
