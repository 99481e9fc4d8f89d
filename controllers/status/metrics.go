package status

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/approval"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// Metrics: node_group_node_status is one-hot per node over
// approval.States; node_manager_node_ready is each grouped node's
// readiness (the group-availability alerts count it, and
// D8NodeIsNotUpdating fires only for Ready nodes); waiting counts nodes per
// group and kind of wait. Labels are node and group names and the fixed
// state and kind lists: nothing unbounded such as error text.
type Metrics struct {
	NodeStatus *prometheus.GaugeVec
	NodeReady  *prometheus.GaugeVec
	Waiting    *prometheus.GaugeVec
	Approved   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		NodeStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_group_node_status",
			Help: "The node's update state: 1 for its current status, 0 for the others.",
		}, []string{"node", "node_group", "status"}),
		NodeReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_node_ready",
			Help: "1 while the node's Ready condition is True, 0 otherwise; one series per node of a group.",
		}, []string{"node", "node_group"}),
		Waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_nodes_waiting",
			Help: "Nodes of a group waiting for an update approval (kind=update), a disruption approval (kind=disruption) or a person's disruption approval (kind=manual_disruption).",
		}, []string{"node_group", "kind"}),
	}
	m.Approved = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "node_manager_nodes_approved",
		Help: "Nodes of a group holding an update approval (whatever step of the update they are at).",
	}, []string{"node_group"})
	reg.MustRegister(m.NodeStatus, m.NodeReady, m.Waiting, m.Approved)
	return m
}

// export sets the one-hot node states of a group and drops the series of
// nodes that left it (g nil: the group is gone).
func (c *Controller) export(group string, g *deckhousev1.NodeGroup, ns []*corev1.Node, checksum string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	waiting := map[string]float64{"update": 0, "disruption": 0, "manual_disruption": 0}
	approved := 0.0
	for _, n := range ns {
		names = append(names, n.Name)
		if nodes.Has(n, deckhousev1.ApprovedAnnotation) {
			approved++
		}
		ready := 0.0
		if nodes.IsReady(n) {
			ready = 1
		}
		c.metrics.NodeReady.WithLabelValues(n.Name, group).Set(ready)
		state := approval.State(n, g, checksum)
		for _, s := range approval.States {
			v := 0.0
			if s == state {
				v = 1
			}
			c.metrics.NodeStatus.WithLabelValues(n.Name, group, s).Set(v)
		}
		switch state {
		case approval.StateWaitingForApproval:
			waiting["update"]++
		case approval.StateWaitingForDisruptionApproval:
			waiting["disruption"]++
		case approval.StateWaitingForManualDisruptionApproval:
			waiting["manual_disruption"]++
		}
	}
	for _, old := range c.exported[group] {
		if !slices.Contains(names, old) {
			for _, s := range approval.States {
				c.metrics.NodeStatus.DeleteLabelValues(old, group, s)
			}
			c.metrics.NodeReady.DeleteLabelValues(old, group)
		}
	}
	if g == nil {
		delete(c.exported, group)
		for kind := range waiting {
			c.metrics.Waiting.DeleteLabelValues(group, kind)
		}
		c.metrics.Approved.DeleteLabelValues(group)
		return
	}
	c.exported[group] = names
	for kind, v := range waiting {
		c.metrics.Waiting.WithLabelValues(group, kind).Set(v)
	}
	c.metrics.Approved.WithLabelValues(group).Set(approved)
}
