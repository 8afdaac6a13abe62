package metrics

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// InstrumentTransport wraps next (http.DefaultTransport when nil) so that
// every HTTP request to the API is counted and timed: each retry the client
// makes is a request of its own. Give it to the client with
// client.WithHTTPClient(&http.Client{Transport: m.InstrumentTransport(nil)}).
//
// Only the method (lower case, as promhttp writes it) and the status code
// become labels; paths carry ids and would make a series per message.
func (m *Metrics) InstrumentTransport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	rt := promhttp.InstrumentRoundTripperCounter(m.apiRequests,
		promhttp.InstrumentRoundTripperDuration(m.apiDuration, next))
	return errorCounter{next: rt, errors: m.apiErrors}
}

// errorCounter counts the requests that got no response at all, which the
// promhttp wrappers leave out.
type errorCounter struct {
	next   http.RoundTripper
	errors *prometheus.CounterVec
}

func (e errorCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := e.next.RoundTrip(r)
	if err != nil {
		// Lower case, as promhttp labels the other two.
		method := strings.ToLower(r.Method)
		if method == "" {
			method = "get"
		}
		e.errors.WithLabelValues(method).Inc()
	}
	return resp, err
}
