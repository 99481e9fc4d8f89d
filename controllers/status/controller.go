package status

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/manager"
	applyv1 "github.com/node-manager/node-manager/generated/applyconfiguration/deckhouse/v1"
)

// Metrics: node_group_node_status is one-hot per node over
// approval.States; waiting counts nodes per group and kind of wait.
type Metrics struct {
	NodeStatus *prometheus.GaugeVec
	Waiting    *prometheus.GaugeVec
	Approved   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		NodeStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_group_node_status",
			Help: "The node's update state: 1 for its current status, 0 for the others.",
		}, []string{"node", "node_group", "status"}),
		Waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_nodes_waiting",
			Help: "Nodes of a group waiting for an update approval (kind=update), a disruption approval (kind=disruption) or a person's disruption approval (kind=manual_disruption).",
		}, []string{"node_group", "kind"}),
	}
	m.Approved = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "node_manager_nodes_approved",
		Help: "Nodes of a group holding an update approval (whatever step of the update they are at).",
	}, []string{"node_group"})
	reg.MustRegister(m.NodeStatus, m.Waiting, m.Approved)
	return m
}

// Controller writes NodeGroup status and the node-state metrics.
type Controller struct {
	*manager.GroupLoop
	d       *manager.Deps
	metrics *Metrics

	mu       sync.Mutex
	exported map[string][]string // group -> nodes with node_group_node_status series
}

// New wires the controller to the shared informers.
func New(d *manager.Deps) *Controller {
	c := &Controller{d: d, metrics: newMetrics(d.Registry), exported: map[string][]string{}}
	c.GroupLoop = manager.NewGroupLoop(d, "nodegroup-status", c.sync)
	return c
}

func (c *Controller) sync(ctx context.Context, group string) error {
	g, err := c.Groups.Get(group)
	if apierrors.IsNotFound(err) {
		c.export(group, nil, nil, "")
		return nil
	}
	if err != nil {
		return err
	}
	ns, err := c.d.Nodes.InGroup(group)
	if err != nil {
		return err
	}
	checksum := c.Checksum(group)
	s := Compute(g, checksum, ns, metav1.NewTime(c.d.Clock.Now()))
	c.export(group, g, ns, checksum)
	if unchanged(g, s) {
		return nil
	}
	ac := applyv1.NodeGroup(group).WithStatus(applyv1.NodeGroupStatus().
		WithNodes(s.Nodes).WithReady(s.Ready).WithUpToDate(s.UpToDate).
		WithKubernetesVersion(s.KubernetesVersion).
		WithConditionSummary(applyv1.ConditionSummary().WithReady(s.SummaryReady).WithStatusMessage(s.SummaryMessage)).
		WithConditions(conditions(s.Conditions)...))
	if _, err := c.d.NodeManager.DeckhouseV1().NodeGroups().ApplyStatus(ctx, ac,
		metav1.ApplyOptions{FieldManager: deckhousev1.NodeManagerControllerName, Force: true}); err != nil {
		return fmt.Errorf("writing the status of NodeGroup %s: %w", group, err)
	}
	return nil
}

func conditions(cs []metav1.Condition) []*metav1ac.ConditionApplyConfiguration {
	out := make([]*metav1ac.ConditionApplyConfiguration, 0, len(cs))
	for _, c := range cs {
		out = append(out, metav1ac.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
			WithMessage(c.Message).WithObservedGeneration(c.ObservedGeneration).WithLastTransitionTime(c.LastTransitionTime))
	}
	return out
}

// unchanged reports whether the group already shows s, so nothing is written.
func unchanged(g *deckhousev1.NodeGroup, s Status) bool {
	st := g.Status
	if st.Nodes != s.Nodes || st.Ready != s.Ready || st.UpToDate != s.UpToDate || st.KubernetesVersion != s.KubernetesVersion {
		return false
	}
	if st.ConditionSummary == nil || st.ConditionSummary.Ready != s.SummaryReady || st.ConditionSummary.StatusMessage != s.SummaryMessage {
		return false
	}
	for _, want := range s.Conditions {
		have := meta.FindStatusCondition(st.Conditions, want.Type)
		if have == nil || have.Status != want.Status || have.Reason != want.Reason || have.Message != want.Message ||
			have.ObservedGeneration != want.ObservedGeneration || !have.LastTransitionTime.Equal(&want.LastTransitionTime) {
			return false
		}
	}
	return true
}
