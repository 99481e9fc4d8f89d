package nodetemplate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// sync keeps one node's restricted group label equal to its Instance's
// group and applies that group's template to it.
func (c *Controller) sync(ctx context.Context, name string) error {
	n, err := c.d.Nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.unmanaged.DeleteLabelValues(name)
		return nil
	}
	if err != nil {
		return err
	}
	// The group is the Instance's: see the package comment.
	var inst *deckhousev1alpha1.Instance
	switch inst, err = c.instances.Get(name); {
	case apierrors.IsNotFound(err):
		inst = nil
	case err != nil:
		return err
	}
	group := ""
	if inst != nil {
		group = inst.Labels[deckhousev1.NodeGroupLabel]
	}
	change := &nodes.Change{}
	ng, err := c.groupOf(ctx, n, inst, group)
	if err != nil {
		return err
	}
	if ng != nil {
		res := Compute(n, ng)
		if res.LastAppliedErr != nil {
			c.d.Recorder.Eventf(n, ng, corev1.EventTypeWarning, ReasonBadLastApplied, "ApplyNodeTemplate",
				"%v; removed nothing and rewrote it", res.LastAppliedErr)
		}
		change.Merge(res.Change)
	}
	// Last, so that nothing else decides it.
	change.Merge(RestrictedGroup(n, group))
	if change.Empty() {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Applying the node template", "node", name, "nodeGroup", group, "change", change.String())
	if _, err := nodes.Patch(ctx, c.d.Kube, c.d.Nodes, n, change); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("applying the template of group %q (and its restricted group label) to node %s: %w", group, name, err)
	}
	return nil
}

// groupOf is the NodeGroup whose template node n gets: its Instance's
// group, when the Node is managed (carries a group label of its own) and
// the group exists; nil otherwise (the node is left alone but for its
// restricted group label).
func (c *Controller) groupOf(ctx context.Context, n *corev1.Node, inst *deckhousev1alpha1.Instance, group string) (*deckhousev1.NodeGroup, error) {
	if nodes.Label(n) == "" {
		c.unmanaged.WithLabelValues(n.Name).Set(1)
		return nil, nil
	}
	c.unmanaged.DeleteLabelValues(n.Name)
	switch {
	case inst == nil:
		klog.FromContext(ctx).V(2).Info("Node without an Instance left alone until node-manager admits it", "node", n.Name, "nodeLabel", nodes.Label(n))
		return nil, nil
	case group == "":
		klog.FromContext(ctx).V(2).Info("Node whose Instance names no group left alone", "node", n.Name)
		return nil, nil
	case group != nodes.Label(n):
		klog.FromContext(ctx).V(2).Info("Node's group label differs from its Instance's; applying the Instance's group", "node", n.Name, "nodeLabel", nodes.Label(n), "nodeGroup", group)
	}
	ng, err := c.groups.Get(group)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		logged := c.unknownLogged[group]
		c.unknownLogged[group] = true
		c.mu.Unlock()
		if !logged {
			klog.FromContext(ctx).V(2).Info("Node of an unknown group left alone", "node", n.Name, "nodeGroup", group)
		}
		return nil, nil
	}
	return ng, err
}

// RestrictedGroup is the change that makes node n's restricted group
// label (deckhousev1.NodeGroupRestrictedLabel) say group, the group of its
// Instance, or removes it when group is "" (no Instance, or one without a
// group: the node is in no group). The kubelet cannot write that label
// (NodeRestriction), so what node-manager-controller writes here is what
// selects the node for its group's fencing agents, whatever the node's
// own node.deckhouse.io/group says. It is set on every node, managed or
// not, whatever the template and whether the group exists.
func RestrictedGroup(n *corev1.Node, group string) *nodes.Change {
	change := &nodes.Change{}
	have, ok := n.Labels[deckhousev1.NodeGroupRestrictedLabel]
	switch {
	case group == "" && ok:
		change.Labels = map[string]*string{deckhousev1.NodeGroupRestrictedLabel: nil}
	case group != "" && (!ok || have != group):
		change.Labels = map[string]*string{deckhousev1.NodeGroupRestrictedLabel: &group}
	}
	return change
}
