package nodetemplate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// sync applies one node's group template to it.
func (c *Controller) sync(ctx context.Context, name string) error {
	n, err := c.d.Nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.unmanaged.DeleteLabelValues(name)
		return nil
	}
	if err != nil {
		return err
	}
	if nodes.Label(n) == "" {
		c.unmanaged.WithLabelValues(name).Set(1)
		return nil
	}
	c.unmanaged.DeleteLabelValues(name)

	// The group is the Instance's: see the package comment.
	inst, err := c.instances.Get(name)
	if apierrors.IsNotFound(err) {
		klog.V(2).InfoS("Node without an Instance left alone until node-manager admits it", "controller", Name, "node", name, "nodeLabel", nodes.Label(n))
		return nil
	}
	if err != nil {
		return err
	}
	group := inst.Labels[deckhousev1.NodeGroupLabel]
	if group == "" {
		klog.V(2).InfoS("Node whose Instance names no group left alone", "controller", Name, "node", name)
		return nil
	}
	if group != nodes.Label(n) {
		klog.V(2).InfoS("Node's group label differs from its Instance's; applying the Instance's group", "controller", Name, "node", name, "nodeLabel", nodes.Label(n), "nodeGroup", group)
	}

	ng, err := c.groups.Get(group)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		logged := c.unknownLogged[group]
		c.unknownLogged[group] = true
		c.mu.Unlock()
		if !logged {
			klog.V(2).InfoS("Node of an unknown group left alone", "controller", Name, "node", name, "nodeGroup", group)
		}
		return nil
	}
	if err != nil {
		return err
	}

	res := Compute(n, ng)
	if res.LastAppliedErr != nil {
		c.d.Recorder.Eventf(n, ng, corev1.EventTypeWarning, ReasonBadLastApplied, "ApplyNodeTemplate",
			"%v; removed nothing and rewrote it", res.LastAppliedErr)
	}
	if res.Change.Empty() {
		return nil
	}
	klog.V(2).InfoS("Applying the node template", "controller", Name, "node", name, "nodeGroup", group, "change", res.Change.String())
	if _, err := nodes.Patch(ctx, c.d.Kube, c.d.Nodes, n, res.Change); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("applying the template of group %s: %w", group, err)
	}
	return nil
}
