package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	applyv1 "github.com/node-manager/node-manager/generated/applyconfiguration/deckhouse/v1"
)

// stepFailedReason is the reason of bashible's Event about a failed step
// (templates/tree/bashible.sh.tpl), whose note ends with the step's last
// lines of output.
const stepFailedReason = "BashibleStepFailed"

// groupInstances are the Instances of the group's nodes, by name.
func (c *Controller) groupInstances(group string) (map[string]*deckhousev1alpha1.Instance, error) {
	list, err := c.instances.List(labels.SelectorFromSet(labels.Set{deckhousev1.NodeGroupLabel: group}))
	if err != nil {
		return nil, fmt.Errorf("listing the Instances of group %s: %w", group, err)
	}
	out := make(map[string]*deckhousev1alpha1.Instance, len(list))
	for _, inst := range list {
		out[inst.Name] = inst
	}
	return out, nil
}

// keepRollout writes what the decision says about the group's rollout:
// the record (RolloutStateAnnotation) and the removal of a resume
// annotation it read, in one patch; then the RolloutHalted condition, the
// Event of a new halt or a resume, and the metrics. A group that is not
// Gated loses a record and a halt it had.
func (c *Controller) keepRollout(ctx context.Context, g *deckhousev1.NodeGroup, checksum string, d Decision) error {
	r := d.Rollout
	if r != nil && d.Halted != nil && d.Halted.Reason == ReasonBashibleFailed {
		// The halt is recorded once, so its last lines are read once.
		d.Halted.Output = c.lastOutput(ctx, d.Halted.Node)
		r.Halt = d.Halted
	}
	annotations := map[string]any{}
	old, had := g.Annotations[deckhousev1.RolloutStateAnnotation]
	switch {
	case r != nil && (!had || old != r.Encode()):
		annotations[deckhousev1.RolloutStateAnnotation] = r.Encode()
	case r == nil && had:
		annotations[deckhousev1.RolloutStateAnnotation] = nil
	}
	if d.Resumed {
		annotations[deckhousev1.ResumeRolloutAnnotation] = nil
	}
	if len(annotations) > 0 {
		// Guarded by the resourceVersion the decision was made on: a
		// record written over a newer one could approve a second batch.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": g.ResourceVersion, "annotations": annotations}})
		if _, err := c.d.NodeManager.DeckhouseV1().NodeGroups().Patch(ctx, g.Name, types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: deckhousev1.ApprovalControllerFieldManager}); err != nil {
			return fmt.Errorf("recording the rollout of NodeGroup %s (annotation %s): %w", g.Name, deckhousev1.RolloutStateAnnotation, err)
		}
	}
	c.metrics.set(g.Name, r)
	if d.Halted != nil {
		c.metrics.Halts.WithLabelValues(g.Name).Inc()
		msg := d.Halted.Describe(g.Name, checksum)
		klog.FromContext(ctx).Info("Rollout halted", "group", g.Name, "node", d.Halted.Node, "reason", d.Halted.Reason, "step", d.Halted.Step)
		c.d.Recorder.Eventf(groupRef(g), nil, corev1.EventTypeWarning, ConditionRolloutHalted, "Update", "%s", msg)
	}
	if d.Resumed {
		klog.FromContext(ctx).Info("Rollout resumed by annotation", "group", g.Name)
		c.d.Recorder.Eventf(groupRef(g), nil, corev1.EventTypeNormal, "RolloutResumed", "Update",
			"the rollout of configuration %.12s goes on: %s was set (and is removed)", checksum, deckhousev1.ResumeRolloutAnnotation)
	}
	return c.applyHalted(ctx, g, checksum, r)
}

// applyHalted applies the RolloutHalted condition as the record says,
// when it differs from the group's. A group that never had the condition
// and is not Gated gets none.
func (c *Controller) applyHalted(ctx context.Context, g *deckhousev1.NodeGroup, checksum string, r *Rollout) error {
	have := meta.FindStatusCondition(g.Status.Conditions, ConditionRolloutHalted)
	if r == nil && have == nil {
		return nil
	}
	status, reason, msg := metav1.ConditionFalse, ReasonRolloutProceeding, "no node of the rollout has failed"
	if r == nil {
		msg = "the group has no canaries and no soak time (spec.update): its rollouts never halt"
	}
	if r != nil && r.Halt != nil {
		status, reason, msg = metav1.ConditionTrue, r.Halt.Reason, r.Halt.Describe(g.Name, checksum)
	}
	if have != nil && have.Status == status && have.Reason == reason && have.Message == msg && have.ObservedGeneration == g.Generation {
		return nil
	}
	since := metav1.NewTime(c.d.Clock.Now())
	if have != nil && have.Status == status {
		since = have.LastTransitionTime
	}
	ac := applyv1.NodeGroup(g.Name).WithStatus(applyv1.NodeGroupStatus().WithConditions(
		metav1ac.Condition().WithType(ConditionRolloutHalted).WithStatus(status).WithReason(reason).WithMessage(msg).
			WithObservedGeneration(g.Generation).WithLastTransitionTime(since)))
	if _, err := c.d.NodeManager.DeckhouseV1().NodeGroups().ApplyStatus(ctx, ac,
		metav1.ApplyOptions{FieldManager: deckhousev1.ApprovalControllerFieldManager, Force: true}); err != nil {
		return fmt.Errorf("applying condition %s to NodeGroup %s: %w", ConditionRolloutHalted, g.Name, err)
	}
	return nil
}

// lastOutput is the last lines of output of the node's latest failed
// step, from bashible's Event; empty when there is none to read.
func (c *Controller) lastOutput(ctx context.Context, node string) string {
	list, err := c.d.Kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("regarding.name", node), fields.OneTermEqualSelector("reason", stepFailedReason)).String(),
	})
	if err != nil {
		klog.FromContext(ctx).Info("Could not read the failed step's output for the halt; the condition names the step without it", "node", node, "err", err)
		return ""
	}
	if len(list.Items) == 0 {
		return ""
	}
	latest := slices.MaxFunc(list.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	_, out, _ := strings.Cut(latest.Note, "last output: ")
	return clip(out)
}
