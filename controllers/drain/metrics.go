package drain

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the drain controller; the only label is the node name.
type Metrics struct {
	Draining    *prometheus.GaugeVec
	DrainFailed *prometheus.GaugeVec
	Drains      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Draining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "d8_node_draining",
			Help: "1 while node-manager drains the node.",
		}, []string{"node"}),
		DrainFailed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_node_drain_failed",
			Help: "1 while the node's last drain attempt failed (it is being retried).",
		}, []string{"node"}),
		Drains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "node_manager_drains_total",
			Help: "Drain attempts by result (succeeded, failed, cancelled).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.Draining, m.DrainFailed, m.Drains)
	return m
}
