package registry

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the registry's Prometheus metrics: the requests it serves.
// Label values are the three resource names and the verbs get, list and
// watch, so the series are few and fixed.
type Metrics struct {
	Requests *prometheus.CounterVec
}

// NewMetrics creates the metrics; register Collectors with the registry
// served on /metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bashible_apiserver_requests_total",
			Help: "Requests served, by resource and verb.",
		}, []string{"resource", "verb"}),
	}
}

// Collectors lists every metric for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Requests}
}

// served counts a request for resource with verb.
func (m *Metrics) served(resource, verb string) {
	m.Requests.WithLabelValues(resource, verb).Inc()
}
