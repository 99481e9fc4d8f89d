package nodetemplate

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	listers "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// TaintMissingMetric is 1 for a group whose nodeTemplate lacks the taint
// its role needs; today only MasterNodeGroup without the ControlPlaneRoleLabel taint,
// which is Deckhouse's d8_nodegroup_taint_missing{name="master"}.
const TaintMissingMetric = "d8_nodegroup_taint_missing"

// taintMissing computes d8_nodegroup_taint_missing from the NodeGroup
// lister at every scrape, so the series follows the group's spec without
// any state to keep or clean up. The label is the group's name (Deckhouse
// calls it name).
type taintMissing struct {
	groups listers.NodeGroupLister
	desc   *prometheus.Desc
}

func newTaintMissing(groups listers.NodeGroupLister) *taintMissing {
	return &taintMissing{groups: groups, desc: prometheus.NewDesc(TaintMissingMetric,
		"1 when the "+deckhousev1.MasterNodeGroup+" NodeGroup's nodeTemplate has no "+deckhousev1.ControlPlaneRoleLabel+
			" taint, so ordinary pods may be scheduled on control-plane nodes.", []string{"name"}, nil)}
}

// Describe implements prometheus.Collector.
func (t *taintMissing) Describe(ch chan<- *prometheus.Desc) { ch <- t.desc }

// Collect implements prometheus.Collector: one series for the master group
// when it exists, none before the informers have it.
func (t *taintMissing) Collect(ch chan<- prometheus.Metric) {
	gs, err := t.groups.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Listing NodeGroups for the metric failed", "controller", Name, "metric", TaintMissingMetric)
		return
	}
	for _, g := range gs {
		if g.Name != deckhousev1.MasterNodeGroup {
			continue
		}
		v := 1.0
		if MasterTainted(g) {
			v = 0
		}
		ch <- prometheus.MustNewConstMetric(t.desc, prometheus.GaugeValue, v, g.Name)
	}
}

// MasterTainted reports whether g's nodeTemplate carries the ControlPlaneRoleLabel taint
// (any effect: a user who chose PreferNoSchedule chose it deliberately).
func MasterTainted(g *deckhousev1.NodeGroup) bool {
	if g.Spec.NodeTemplate == nil {
		return false
	}
	return slices.ContainsFunc(g.Spec.NodeTemplate.Taints, func(t deckhousev1.Taint) bool {
		return t.Key == deckhousev1.ControlPlaneRoleLabel
	})
}
