package status

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// Metrics: node_group_node_status is one-hot per node over
// nodes.States; node_manager_node_ready is each grouped node's
// readiness (the group-availability alerts count it, and
// D8NodeIsNotUpdating fires only for Ready nodes); waiting counts nodes per
// group and kind of wait. Labels are node and group names and the fixed
// state and kind lists: nothing unbounded such as error text.
type Metrics struct {
	// Nodes makes node_group_node_status and node_manager_node_ready.
	Nodes    *NodeSeries
	Waiting  *prometheus.GaugeVec
	Approved *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Nodes: &NodeSeries{
			groups: map[string]map[string]nodeState{},
			status: prometheus.NewDesc("node_group_node_status",
				"The node's update state: 1 for its current status, 0 for the others.", []string{"node", "node_group", "status"}, nil),
			ready: prometheus.NewDesc("node_manager_node_ready",
				"1 while the node's Ready condition is True, 0 otherwise; one series per node of a group.", []string{"node", "node_group"}, nil),
		},
		Waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_nodes_waiting",
			Help: "Nodes of a group waiting for an update approval (kind=update), a disruption approval (kind=disruption) or a person's disruption approval (kind=manual_disruption).",
		}, []string{"node_group", "kind"}),
	}
	m.Approved = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "node_manager_nodes_approved",
		Help: "Nodes of a group holding an update approval (whatever step of the update they are at).",
	}, []string{"node_group"})
	reg.MustRegister(m.Nodes, m.Waiting, m.Approved)
	return m
}

// NodeSeries is the collector of the per-node series: it keeps each node's
// update state and readiness (a few bytes a node) and makes the series
// when scraped. GaugeVecs kept fourteen series with their label pairs for
// every node, half the controller's heap with 5,000 nodes.
type NodeSeries struct {
	status, ready *prometheus.Desc

	mu     sync.Mutex
	groups map[string]map[string]nodeState // group -> node -> its state
}

type nodeState struct {
	state string // one of nodes.States
	ready bool
}

// Describe implements prometheus.Collector.
func (s *NodeSeries) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.status
	ch <- s.ready
}

// Collect implements prometheus.Collector.
func (s *NodeSeries) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for group, ns := range s.groups {
		for node, st := range ns {
			for _, state := range nodes.States {
				ch <- prometheus.MustNewConstMetric(s.status, prometheus.GaugeValue, one(state == st.state), node, group, state)
			}
			ch <- prometheus.MustNewConstMetric(s.ready, prometheus.GaugeValue, one(st.ready), node, group)
		}
	}
}

// set replaces the group's nodes (nil: the group is gone, and so are its
// series).
func (s *NodeSeries) set(group string, ns map[string]nodeState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns == nil {
		delete(s.groups, group)
		return
	}
	s.groups[group] = ns
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// export sets the one-hot node states of a group; nodes that left it lose
// their series (g nil: the group is gone).
func (c *Controller) export(group string, g *deckhousev1.NodeGroup, ns []*corev1.Node, checksum string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	states := make(map[string]nodeState, len(ns))
	waiting := map[string]float64{"update": 0, "disruption": 0, "manual_disruption": 0}
	approved := 0.0
	for _, n := range ns {
		if nodes.Has(n, deckhousev1.ApprovedAnnotation) {
			approved++
		}
		state := nodes.State(n, g, checksum)
		states[n.Name] = nodeState{state: state, ready: nodes.IsReady(n)}
		switch state {
		case nodes.StateWaitingForApproval:
			waiting["update"]++
		case nodes.StateWaitingForDisruptionApproval:
			waiting["disruption"]++
		case nodes.StateWaitingForManualDisruptionApproval:
			waiting["manual_disruption"]++
		}
	}
	if g == nil {
		c.metrics.Nodes.set(group, nil)
		for kind := range waiting {
			c.metrics.Waiting.DeleteLabelValues(group, kind)
		}
		c.metrics.Approved.DeleteLabelValues(group)
		return
	}
	c.metrics.Nodes.set(group, states)
	for kind, v := range waiting {
		c.metrics.Waiting.WithLabelValues(group, kind).Set(v)
	}
	c.metrics.Approved.WithLabelValues(group).Set(approved)
}
