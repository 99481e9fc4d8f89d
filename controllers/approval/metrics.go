package approval

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of update approval's gated rollouts (canary.go). The only label
// is the group's name: nothing unbounded.
type Metrics struct {
	// Halted is 1 while a group's rollout is halted, 0 otherwise.
	Halted *prometheus.GaugeVec
	// Soaking is 1 while a group's finished batch soaks, 0 otherwise.
	Soaking *prometheus.GaugeVec
	// Halts counts the halts of a group's rollouts.
	Halts *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_rollout_halted",
			Help: "1 while the rollout of a group with canaries or a soak time (spec.update) is halted by a failed node, 0 otherwise; the group's RolloutHalted condition names the node and the step.",
		}, []string{"node_group"}),
		Soaking: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_rollout_soaking",
			Help: "1 while a finished batch of a group's rollout soaks (spec.update.soakTime) before the next is approved, 0 otherwise.",
		}, []string{"node_group"}),
		Halts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "node_manager_rollout_halts_total",
			Help: "Rollouts halted by a failed node of a batch, by group.",
		}, []string{"node_group"}),
	}
	reg.MustRegister(m.Halted, m.Soaking, m.Halts)
	return m
}

// set exports a group's rollout record; nil (a group without canaries or
// soak time) is 0.
func (m *Metrics) set(group string, r *Rollout) {
	halted, soaking := 0.0, 0.0
	if r != nil && r.Halt != nil {
		halted = 1
	}
	if r != nil && r.Halt == nil && r.SoakUntil != nil {
		soaking = 1
	}
	m.Halted.WithLabelValues(group).Set(halted)
	m.Soaking.WithLabelValues(group).Set(soaking)
}

// forget drops the series of a deleted group.
func (m *Metrics) forget(group string) {
	m.Halted.DeleteLabelValues(group)
	m.Soaking.DeleteLabelValues(group)
	m.Halts.DeleteLabelValues(group)
}
