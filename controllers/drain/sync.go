package drain

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// sync starts the node's drain while it carries the draining annotation,
// and otherwise cancels a running one and clears what a drain left.
func (c *Controller) sync(ctx context.Context, name string) error {
	n, err := c.d.Nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.stop(ctx, name, "the node is gone")
		c.metrics.Draining.DeleteLabelValues(name)
		c.metrics.DrainFailed.DeleteLabelValues(name)
		c.metrics.HeldByBudget.DeleteLabelValues(name)
		return nil
	}
	if err != nil {
		return err
	}
	if nodes.Has(n, deckhousev1.DrainingAnnotation) {
		c.start(name)
		return nil
	}
	if c.stop(ctx, name, "the draining annotation was removed") {
		c.d.Recorder.Eventf(n, nil, corev1.EventTypeNormal, "DrainCancelled", "Drain",
			"the drain was cancelled because update.node.deckhouse.io/draining was removed; the node stays cordoned (kubectl uncordon %s to undo)", n.Name)
		c.metrics.Drains.WithLabelValues("cancelled").Inc()
	}
	c.metrics.Draining.DeleteLabelValues(name)
	c.metrics.DrainFailed.DeleteLabelValues(name)
	c.metrics.HeldByBudget.DeleteLabelValues(name)
	// Leftovers: a failure note without a drain request, and a user's
	// drained marker on a node that has been uncordoned since.
	ch := (&nodes.Change{}).Remove(n, deckhousev1.DrainFailedAnnotation)
	if v, ok := n.Annotations[deckhousev1.DrainedAnnotation]; ok && v == "user" && !n.Spec.Unschedulable {
		ch.Remove(n, deckhousev1.DrainedAnnotation)
	}
	_, err = nodes.Patch(ctx, c.d.Kube, c.d.Nodes, n, ch)
	return err
}
