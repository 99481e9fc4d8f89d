package drain

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the drain controller; the only label is the node name (the
// budgets and pods are in the Node's events and drain-failed annotation).
type Metrics struct {
	Draining    *prometheus.GaugeVec
	DrainFailed *prometheus.GaugeVec
	// HeldByBudget is 1 while a drain under drainTimeoutPolicy Wait has
	// passed its deadline with pods a PodDisruptionBudget keeps.
	HeldByBudget *prometheus.GaugeVec
	Drains       *prometheus.CounterVec
	// Deleted counts pods deleted at a drain deadline (policy Delete).
	Deleted prometheus.Counter
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
		HeldByBudget: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_node_drain_held_by_pdb",
			Help: "1 while the node's drain has passed its deadline with pods a PodDisruptionBudget keeps, and its group's drainTimeoutPolicy is Wait (nothing is deleted).",
		}, []string{"node"}),
		Deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "node_manager_drain_deleted_pods_total",
			Help: "Pods deleted because they were still not evicted at their drain's deadline (drainTimeoutPolicy Delete).",
		}),
		Drains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "node_manager_drains_total",
			Help: "Drain attempts by result (succeeded, failed, cancelled).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.Draining, m.DrainFailed, m.HeldByBudget, m.Drains, m.Deleted)
	return m
}
