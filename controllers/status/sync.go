package status

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	applyv1 "github.com/node-manager/node-manager/generated/applyconfiguration/deckhouse/v1"
)

// sync computes one group's status, exports its node metrics, and writes
// the status when it differs from what the group shows.
func (c *Controller) sync(ctx context.Context, group string) error {
	g, err := c.watch.Groups.Get(group)
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
	insts, err := c.instances.List(labels.SelectorFromSet(labels.Set{deckhousev1.NodeGroupLabel: group}))
	if err != nil {
		return err
	}
	checksum := c.watch.Checksum(group)
	now := metav1.NewTime(c.d.Clock.Now())
	s := Compute(g, checksum, ns, c.components, now)
	scale := ComputeScale(g, int32(len(insts)), c.cloud)
	if sc := scaling(g, scale, now); sc != nil {
		s.Conditions = append(s.Conditions, *sc)
	}
	engine := Engine(g, c.components)
	c.export(group, g, ns, checksum)
	if unchanged(g, s) && scaleUnchanged(g, scale) && g.Status.Engine == engine && !hasStaleScaling(g, scale) {
		return nil
	}
	st := applyv1.NodeGroupStatus().
		WithNodes(s.Nodes).WithReady(s.Ready).WithUpToDate(s.UpToDate).WithEngine(engine)
	// As with the counters, an empty error is left out so that a cleared
	// one goes.
	if s.Error != "" {
		st.WithError(s.Error)
	}
	// An unknown counter is left out of the apply, so server-side apply
	// removes a value this manager wrote before instead of showing 0.
	if scale.Desired != nil {
		st.WithDesired(*scale.Desired)
	}
	if scale.Min != nil {
		st.WithMin(*scale.Min)
	}
	if scale.Max != nil {
		st.WithMax(*scale.Max)
	}
	if scale.Instances != nil {
		st.WithInstances(*scale.Instances)
	}
	if scale.Standby != nil {
		st.WithStandby(*scale.Standby)
	}
	for _, mf := range scale.Failures {
		ac := applyv1.MachineFailure().WithName(mf.Name).WithProviderID(mf.ProviderID).WithOwnerRef(mf.OwnerRef)
		if op := mf.LastOperation; op != nil {
			ac.WithLastOperation(applyv1.MachineLastOperation().WithDescription(op.Description).WithLastUpdateTime(op.LastUpdateTime).
				WithState(op.State).WithType(op.Type))
		}
		st.WithLastMachineFailures(ac)
	}
	ac := applyv1.NodeGroup(group).WithStatus(st.
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

// hasStaleScaling reports whether the group shows a Scaling condition
// though its desired size is no longer known (the next apply drops it).
func hasStaleScaling(g *deckhousev1.NodeGroup, scale Scale) bool {
	return scale.Desired == nil && meta.FindStatusCondition(g.Status.Conditions, ConditionScaling) != nil
}

// scaleUnchanged reports whether the group already shows scale.
func scaleUnchanged(g *deckhousev1.NodeGroup, scale Scale) bool {
	st := g.Status
	return sameCount(st.Desired, scale.Desired) && sameCount(st.Min, scale.Min) &&
		sameCount(st.Max, scale.Max) && sameCount(st.Instances, scale.Instances) &&
		apiequality.Semantic.DeepEqual(st.LastMachineFailures, scale.Failures) && (scale.Standby == nil || st.Standby == *scale.Standby)
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
	if st.Error != s.Error {
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
