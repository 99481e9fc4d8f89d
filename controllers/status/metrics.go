package status

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/approval"
	"github.com/node-manager/node-manager/controllers/nodes"
)

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
