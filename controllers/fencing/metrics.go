package fencing

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the fencing controller. Labels are group names and the fixed
// lists of reasons (Reasons) and guard states: nothing unbounded.
type Metrics struct {
	// Fenced counts fenced nodes by group.
	Fenced *prometheus.CounterVec
	// Skipped counts dead nodes left alone, by group and reason (once per
	// node and reason).
	Skipped *prometheus.CounterVec
	// Held is 1 for the reason a group's fencing is held back, 0 for the
	// other reasons; all 0 while nothing is held.
	Held *prometheus.GaugeVec
	// Dead is how many of a group's nodes are dead and not fenced yet.
	Dead *prometheus.GaugeVec
	// Guard is 1 for the outage guard's state (ok, StaleAPIView,
	// ClusterOutage) and 0 for the others.
	Guard *prometheus.GaugeVec
}

// guardStates are the values of the guard metric's state label.
var guardStates = []string{"ok", ReasonStaleAPIView, ReasonClusterOutage}

// heldReasons are the values of the held metric's reason label.
var heldReasons = []string{ReasonUnsafeTiming, ReasonStaleAPIView, ReasonClusterOutage, ReasonGroupQuorumLost, ReasonBlastRadiusCap}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "node_manager_fencing_fenced_total",
			Help: "Dead nodes fenced (pods force-deleted; Node deleted, or kept for Static, CloudStatic and Notify nodes), by group.",
		}, []string{"node_group"}),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "node_manager_fencing_skipped_total",
			Help: "Dead nodes left alone, by group and reason (Maintenance, NoLease, GroupNotFenced, UnsafeTiming, StaleAPIView, ClusterOutage, GroupQuorumLost, BlastRadiusCap); once per node and reason.",
		}, []string{"node_group", "reason"}),
		Held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_fencing_held",
			Help: "1 while fencing in a group is held back for the reason (UnsafeTiming, StaleAPIView, ClusterOutage, GroupQuorumLost, BlastRadiusCap), 0 otherwise; the group's FencingHeld condition says more.",
		}, []string{"node_group", "reason"}),
		Dead: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_fencing_dead_nodes",
			Help: "Nodes of a group whose Lease is older than the group's evacuation delay and that are not fenced (yet).",
		}, []string{"node_group"}),
		Guard: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_fencing_outage_guard",
			Help: "The outage guard's state, one-hot: ok, StaleAPIView (no Lease renewal seen: the controller's view is stale) or ClusterOutage (too many fenced nodes dead at once); in the last two nobody is fenced.",
		}, []string{"state"}),
	}
	reg.MustRegister(m.Fenced, m.Skipped, m.Held, m.Dead, m.Guard)
	return m
}

// guard sets the one-hot guard state ("" is ok).
func (m *Metrics) guard(state string) {
	if state == "" {
		state = "ok"
	}
	for _, s := range guardStates {
		v := 0.0
		if s == state {
			v = 1
		}
		m.Guard.WithLabelValues(s).Set(v)
	}
}

// held sets a group's held and dead-node series.
func (m *Metrics) held(group string, h Held) {
	for _, r := range heldReasons {
		v := 0.0
		if h.Held && h.Reason == r {
			v = 1
		}
		m.Held.WithLabelValues(group, r).Set(v)
	}
	m.Dead.WithLabelValues(group).Set(float64(h.Dead))
}

// forget drops the series of a group that is no longer fenced.
func (m *Metrics) forget(group string) {
	for _, r := range heldReasons {
		m.Held.DeleteLabelValues(group, r)
	}
	m.Dead.DeleteLabelValues(group)
}
