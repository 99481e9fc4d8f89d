package instances

import (
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics: node_manager_node_without_instance is 1 for every Node that has
// no Instance and gets none (yet), with the reason (Decide's): such a node
// reads no bundle, so nothing configures or updates it.
type Metrics struct {
	WithoutInstance *prometheus.GaugeVec

	mu     sync.Mutex
	reason map[string]string // node -> the reason its series carries
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		WithoutInstance: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_node_without_instance",
			Help: "1 for a Node that has no Instance and gets none, so it reads no bundle; reason says why (NodeHasNoInstance, NodeHasNoGroupLabel, ConflictingJoins, NodeGroupNotFound).",
		}, []string{"node", "reason"}),
		reason: map[string]string{},
	}
	reg.MustRegister(m.WithoutInstance)
	return m
}

// set exports node's series with reason, replacing one with another reason.
func (m *Metrics) set(node, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.reason[node]; ok && old != reason {
		m.WithoutInstance.DeleteLabelValues(node, old)
	}
	m.reason[node] = reason
	m.WithoutInstance.WithLabelValues(node, reason).Set(1)
}

// forget drops node's series: it has an Instance now, or it is gone.
func (m *Metrics) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.reason[node]; ok {
		m.WithoutInstance.DeleteLabelValues(node, old)
		delete(m.reason, node)
	}
}

// nodes are the nodes that have no Instance.
func (m *Metrics) nodes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.reason))
}
