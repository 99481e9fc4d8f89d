package status

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// groupNameLabel is the label of Deckhouse's per-group series.
const groupNameLabel = "node_group_name"

// groupMetric is one series of Deckhouse's per-group family, read from a
// NodeGroup's status (a count node-manager does not know is 0, as
// Deckhouse exports an unset status field).
type groupMetric struct {
	desc  *prometheus.Desc
	value func(*deckhousev1.NodeGroup) float64
}

// GroupSeries is the collector of Deckhouse's d8_node_group_* family, one
// series of each per NodeGroup, labelled node_group_name. It reads the
// groups from the informer's cache when scraped, so the series are always
// the status the API shows and a deleted group's series go with it; it
// keeps nothing of its own. Dashboards and alerts written for Deckhouse
// read these names.
type GroupSeries struct {
	groups  nmlisters.NodeGroupLister
	metrics []groupMetric
}

// NewGroupSeries makes the collector over the groups of lister.
func NewGroupSeries(groups nmlisters.NodeGroupLister) *GroupSeries {
	count := func(p *int32) float64 {
		if p == nil {
			return 0
		}
		return float64(*p)
	}
	m := func(name, help string, value func(*deckhousev1.NodeGroup) float64) groupMetric {
		return groupMetric{desc: prometheus.NewDesc(name, help, []string{groupNameLabel}, nil), value: value}
	}
	st := func(f func(s *deckhousev1.NodeGroupStatus) float64) func(*deckhousev1.NodeGroup) float64 {
		return func(g *deckhousev1.NodeGroup) float64 { return f(&g.Status) }
	}
	return &GroupSeries{groups: groups, metrics: []groupMetric{
		m("d8_node_group_ready", "Number of Ready nodes in the group (status.ready).", st(func(s *deckhousev1.NodeGroupStatus) float64 { return float64(s.Ready) })),
		m("d8_node_group_nodes", "Number of nodes in the group, in any state (status.nodes).", st(func(s *deckhousev1.NodeGroupStatus) float64 { return float64(s.Nodes) })),
		m("d8_node_group_instances", "Number of instances of the group, in any state (status.instances; 0 when unknown).", st(func(s *deckhousev1.NodeGroupStatus) float64 { return count(s.Instances) })),
		m("d8_node_group_desired", "Desired number of machines of the group (status.desired; 0 when unknown).", st(func(s *deckhousev1.NodeGroupStatus) float64 { return count(s.Desired) })),
		m("d8_node_group_min", "Minimal number of instances of the group (status.min; 0 when unknown).", st(func(s *deckhousev1.NodeGroupStatus) float64 { return count(s.Min) })),
		m("d8_node_group_max", "Maximal number of instances of the group (status.max; 0 when unknown).", st(func(s *deckhousev1.NodeGroupStatus) float64 { return count(s.Max) })),
		m("d8_node_group_up_to_date", "Number of up-to-date nodes of the group (status.upToDate).", st(func(s *deckhousev1.NodeGroupStatus) float64 { return float64(s.UpToDate) })),
		m("d8_node_group_standby", "Number of standby (overprovisioned) instances of the group (status.standby).", st(func(s *deckhousev1.NodeGroupStatus) float64 { return float64(s.Standby) })),
		m("d8_node_group_has_errors", "1 while the group's Error condition is True, else 0.", func(g *deckhousev1.NodeGroup) float64 {
			return one(meta.IsStatusConditionPresentAndEqual(g.Status.Conditions, ConditionError, metav1.ConditionTrue))
		}),
	}}
}

// Describe implements prometheus.Collector.
func (s *GroupSeries) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range s.metrics {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector.
func (s *GroupSeries) Collect(ch chan<- prometheus.Metric) {
	groups, err := s.groups.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Listing NodeGroups from the cache for the d8_node_group_* series")
		return
	}
	for _, g := range groups {
		for _, m := range s.metrics {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.value(g), g.Name)
		}
	}
}
