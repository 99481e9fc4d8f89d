package clusterapi

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/node-manager/node-manager/controllers/nodes"
)

// Series is the collector of Deckhouse's CAPS series, made from the
// informers' caches when scraped (nothing is kept between scrapes):
//
//   - d8_caps_md_{replicas,desired,ready,unavailable,phase}, one of each per
//     MachineDeployment node-manager keeps, labelled machine_deployment_name
//     (the group's name), as Deckhouse exports them: desired is
//     spec.replicas, replicas, ready the status's counts, unavailable
//     replicas minus available (0 when not positive), phase 1 Running,
//     2 ScalingUp, 3 ScalingDown, 4 Failed, 5 anything else; the alert
//     CapsInstanceUnavailable reads unavailable;
//   - node_manager_caps_unmanaged_node{node,node_group}, 1 for each Ready
//     Node of a group Cluster API makes machines for that no Machine of the
//     group backs (joined by hand beside the group's StaticInstances): the
//     alert CapsUnamangedNode (Deckhouse's spelling). Only such nodes have a
//     series, so the set is bounded by the nodes that need attention.
type Series struct {
	c *Controller

	replicas, desired, ready, unavailable, phase, unmanaged *prometheus.Desc
}

const mdNameLabel = "machine_deployment_name"

func newSeries(c *Controller) *Series {
	md := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{mdNameLabel}, nil)
	}
	return &Series{c: c,
		replicas:    md("d8_caps_md_replicas", "Machines of a static group's MachineDeployment (status.replicas)."),
		desired:     md("d8_caps_md_desired", "Desired machines of a static group's MachineDeployment (spec.replicas)."),
		ready:       md("d8_caps_md_ready", "Ready machines of a static group's MachineDeployment (status.readyReplicas)."),
		unavailable: md("d8_caps_md_unavailable", "Machines of a static group's MachineDeployment that are not available (replicas minus availableReplicas, at least 0)."),
		phase:       md("d8_caps_md_phase", "Phase of a static group's MachineDeployment: 1 Running, 2 ScalingUp, 3 ScalingDown, 4 Failed, 5 other."),
		unmanaged: prometheus.NewDesc("node_manager_caps_unmanaged_node",
			"1 for a Ready Node of a group whose machines Cluster API makes that no Machine of the group backs.", []string{"node", "node_group"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (s *Series) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.replicas, s.desired, s.ready, s.unavailable, s.phase, s.unmanaged} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Series) Collect(ch chan<- prometheus.Metric) {
	mds, err := s.c.mds.List(labels.SelectorFromSet(managedLabels()))
	if err != nil {
		klog.ErrorS(err, "Listing MachineDeployments from the cache for the d8_caps_md_* series")
		return
	}
	for _, obj := range mds {
		var md clusterv1.MachineDeployment
		if err := fromUnstructured(obj, &md); err != nil {
			continue
		}
		v := mdValues(&md)
		for _, m := range []struct {
			d *prometheus.Desc
			v float64
		}{{s.replicas, v.replicas}, {s.desired, v.desired}, {s.ready, v.ready}, {s.unavailable, v.unavailable}, {s.phase, v.phase}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, m.v, md.Name)
		}
	}
	unmanaged, err := s.c.unmanagedNodes()
	if err != nil {
		klog.ErrorS(err, "Finding the nodes of Cluster API groups no Machine backs")
		return
	}
	for _, u := range unmanaged {
		ch <- prometheus.MustNewConstMetric(s.unmanaged, prometheus.GaugeValue, 1, u.node, u.group)
	}
}

// phaseFailed is the phase v1beta1 MachineDeployments could report (and
// converted objects still may); Deckhouse numbers it 4. Cluster API no
// longer sets it, and deprecates its constant.
const phaseFailed = "Failed"

type mdSeries struct{ replicas, desired, ready, unavailable, phase float64 }

// mdValues are a MachineDeployment's series, by Deckhouse's definitions.
func mdValues(md *clusterv1.MachineDeployment) mdSeries {
	n := func(p *int32) float64 {
		if p == nil {
			return 0
		}
		return float64(*p)
	}
	v := mdSeries{replicas: n(md.Status.Replicas), desired: n(md.Spec.Replicas), ready: n(md.Status.ReadyReplicas),
		unavailable: max(n(md.Status.Replicas)-n(md.Status.AvailableReplicas), 0)}
	switch clusterv1.MachineDeploymentPhase(md.Status.Phase) {
	case clusterv1.MachineDeploymentPhaseRunning:
		v.phase = 1
	case clusterv1.MachineDeploymentPhaseScalingUp:
		v.phase = 2
	case clusterv1.MachineDeploymentPhaseScalingDown:
		v.phase = 3
	case phaseFailed:
		v.phase = 4
	default:
		v.phase = 5
	}
	return v
}

type unmanagedNode struct{ node, group string }

// unmanagedNodes are the Ready Nodes of the groups Cluster API makes
// machines for (Wanted) that no Machine backs (by the Machine's nodeRef;
// the group of a Node is its Instance's).
func (c *Controller) unmanagedNodes() ([]unmanagedNode, error) {
	machines, err := c.listMachines()
	if err != nil {
		return nil, err
	}
	backed := map[string]bool{}
	for _, m := range machines {
		if m.Status.NodeRef.Name != "" {
			backed[m.Status.NodeRef.Name] = true
		}
	}
	groups, err := c.groups.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []unmanagedNode
	for _, g := range groups {
		if !Wanted(g) {
			continue
		}
		ns, err := c.d.Nodes.InGroup(g.Name)
		if err != nil {
			return nil, err
		}
		for _, n := range ns {
			if nodes.IsReady(n) && !backed[n.Name] {
				out = append(out, unmanagedNode{node: n.Name, group: g.Name})
			}
		}
	}
	return out, nil
}
