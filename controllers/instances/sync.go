package instances

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/nodes"
	applyv1alpha1 "github.com/node-manager/node-manager/generated/applyconfiguration/deckhouse/v1alpha1"
)

// sync keeps one node's Instance: deleted when its Node is gone, adopted
// or reported when the Node has none, its status written otherwise.
func (c *Controller) sync(ctx context.Context, name string) error {
	n, err := c.d.Nodes.Get(name)
	if apierrors.IsNotFound(err) {
		n = nil
	} else if err != nil {
		return err
	}
	inst, err := c.instances.Get(name)
	if apierrors.IsNotFound(err) {
		inst = nil
	} else if err != nil {
		return err
	}
	switch {
	case n == nil && inst == nil:
		c.forget(name)
		c.metrics.forget(name)
		return nil
	case n == nil:
		c.metrics.forget(name)
		return c.nodeGone(ctx, inst)
	case inst == nil:
		if inst, err = c.adopt(ctx, n); inst == nil || err != nil {
			return err
		}
	}
	c.metrics.forget(name)
	c.warnMismatch(n, inst)
	return c.writeStatus(ctx, n, inst)
}

// nodeGone deletes an Instance node-manager made once its Node is really
// gone; an Instance whose Node has not registered yet waits PendingTTL.
func (c *Controller) nodeGone(ctx context.Context, inst *deckhousev1alpha1.Instance) error {
	if inst.Labels[deckhousev1.ManagedByLabel] != deckhousev1.NodeManagerControllerName || inst.DeletionTimestamp != nil {
		return nil
	}
	if inst.Status.NodeRef == nil {
		// Created at certificate approval; the kubelet registers next.
		if wait := inst.CreationTimestamp.Add(PendingTTL).Sub(c.d.Clock.Now()); wait > 0 {
			c.queue.AddAfter(inst.Name, wait)
			return nil
		}
	}
	// The cache may lag behind a Node that has just registered: ask the API.
	_, err := c.d.Kube.CoreV1().Nodes().Get(ctx, inst.Name, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("confirming that the Node of Instance %s is gone: %w", inst.Name, err)
	}
	// The name stays the group's for a while: another group's token must
	// not take over the name of a node that was just removed or fenced.
	if err := c.tombstones.Record(ctx, inst.Name, inst.Labels[deckhousev1.NodeGroupLabel]); err != nil {
		return err
	}
	err = c.d.NodeManager.DeckhouseV1alpha1().Instances().Delete(ctx, inst.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &inst.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Instance %s of a node that is gone: %w", inst.Name, err)
	}
	klog.FromContext(ctx).Info("Deleted the Instance of a node that is gone", "instance", inst.Name, "group", inst.Labels[deckhousev1.NodeGroupLabel],
		"registered", inst.Status.NodeRef != nil)
	return nil
}

// adopt gives a Node without an Instance the Instance Decide allows, or
// reports that it gets none (an Event once per reason, and
// node_manager_node_without_instance). It returns nil when there is no
// Instance to keep.
func (c *Controller) adopt(ctx context.Context, n *corev1.Node) (*deckhousev1alpha1.Instance, error) {
	d := Decide(Facts{Node: n, FirstRun: c.firstRun, Joins: c.joins(n.Name), GroupExists: func(group string) bool {
		_, err := c.groups.Get(group)
		return err == nil
	}})
	switch d.Verdict {
	case Wait:
		// Looked at again when the group appears (enqueueGroup).
		c.withoutInstance(n, d, corev1.EventTypeNormal)
		return nil, nil
	case Refuse:
		c.withoutInstance(n, d, corev1.EventTypeWarning)
		return nil, nil
	}
	g, err := c.groups.Get(d.Group)
	if apierrors.IsNotFound(err) {
		return nil, nil // deleted meanwhile; adopted once it is back (enqueueGroup)
	}
	if err != nil {
		return nil, err
	}
	created, err := c.d.NodeManager.DeckhouseV1alpha1().Instances().Create(ctx, ForNode(n.Name, g), metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		// Made meanwhile (at approval, or by a person): theirs stands.
		c.metrics.forget(n.Name)
		return c.d.NodeManager.DeckhouseV1alpha1().Instances().Get(ctx, n.Name, metav1.GetOptions{})
	case err != nil:
		return nil, fmt.Errorf("creating Instance %s for node %s: %w", n.Name, n.Name, err)
	}
	c.metrics.forget(n.Name)
	klog.FromContext(ctx).Info("Created the Instance of a node that had none", "instance", n.Name, "group", g.Name, "reason", d.Reason)
	c.d.Recorder.Eventf(n, nil, corev1.EventTypeNormal, d.Reason, "PinNodeGroup", "%s", d.Message)
	return created, nil
}

// withoutInstance reports a node that gets no Instance (yet).
func (c *Controller) withoutInstance(n *corev1.Node, d Decision, typ string) {
	c.metrics.set(n.Name, d.Reason)
	c.warnOnce(n, "no-instance:"+d.Reason+":"+d.Group, typ, d.Reason, "%s", d.Message)
}

// joins are the node-manager token joins recorded for node by the CSRs
// that still exist.
func (c *Controller) joins(node string) []Join {
	csrs, err := c.csrs.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []Join
	for _, csr := range csrs {
		if j, ok := JoinOf(csr); ok && j.Node == node {
			out = append(out, j)
		}
	}
	return out
}

// warnMismatch reports a Node whose label names another group than its
// Instance: the label is ignored (a kubelet may write it), never followed.
func (c *Controller) warnMismatch(n *corev1.Node, inst *deckhousev1alpha1.Instance) {
	label, pinned := nodes.Label(n), inst.Labels[deckhousev1.NodeGroupLabel]
	if label == pinned {
		c.forget(n.Name)
		return
	}
	c.warnOnce(n, "label="+label, corev1.EventTypeWarning, ReasonGroupMismatch,
		"node %s is labelled %s=%q but its Instance pins it to group %q: the label is ignored, the node reads only %q's bundles; "+
			"to move a machine to another group, delete its Node and Instance and join it again with that group's bootstrap token",
		n.Name, deckhousev1.NodeGroupLabel, label, pinned, pinned)
}

// warnOnce records an Event about n once per what (per change of what
// the node is warned about, not on every heartbeat).
func (c *Controller) warnOnce(n *corev1.Node, what, typ, reason, note string, args ...any) {
	c.mu.Lock()
	seen := c.warned[n.Name] == what
	c.warned[n.Name] = what
	c.mu.Unlock()
	if !seen {
		c.d.Recorder.Eventf(n, nil, typ, reason, "PinNodeGroup", note, args...)
	}
}

func (c *Controller) forget(name string) {
	c.mu.Lock()
	delete(c.warned, name)
	c.mu.Unlock()
}

func (c *Controller) writeStatus(ctx context.Context, n *corev1.Node, inst *deckhousev1alpha1.Instance) error {
	name := n.Name
	phase, summary, message := Summary(n, inst)
	st := inst.Status
	if st.NodeRef != nil && st.NodeRef.Name == name && st.CurrentStatus != nil && st.CurrentStatus.Phase == phase &&
		st.BashibleStatus == summary && st.Message == message {
		return nil
	}
	now := metav1.NewTime(c.d.Clock.Now())
	ac := applyv1alpha1.Instance(name).WithStatus(applyv1alpha1.InstanceStatus().
		WithNodeRef(applyv1alpha1.NodeRef().WithName(name)).
		WithCurrentStatus(applyv1alpha1.CurrentStatus().WithPhase(phase).WithLastUpdateTime(now)).
		WithBashibleStatus(summary).WithMessage(message))
	if _, err := c.d.NodeManager.DeckhouseV1alpha1().Instances().ApplyStatus(ctx, ac,
		metav1.ApplyOptions{FieldManager: deckhousev1.NodeManagerControllerName, Force: true}); err != nil {
		return fmt.Errorf("writing the status of Instance %s: %w", name, err)
	}
	return nil
}
