package instances

import (
	"context"
	"fmt"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

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
		return nil
	case n == nil:
		return c.nodeGone(ctx, inst)
	case inst == nil:
		if inst, err = c.adopt(ctx, n); inst == nil || err != nil {
			return err
		}
	}
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
	err = c.d.NodeManager.DeckhouseV1alpha1().Instances().Delete(ctx, inst.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &inst.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Instance %s of a node that is gone: %w", inst.Name, err)
	}
	klog.InfoS("Deleted the Instance of a node that is gone", "instance", inst.Name, "group", inst.Labels[deckhousev1.NodeGroupLabel],
		"registered", inst.Status.NodeRef != nil)
	return nil
}

// adopt creates the Instance of a node that predates node-manager from its
// label (trust on first use); any other node without an Instance is only
// reported. It returns nil when there is no Instance to keep.
func (c *Controller) adopt(ctx context.Context, n *corev1.Node) (*deckhousev1alpha1.Instance, error) {
	group := nodes.Group(n)
	if !Adoptable(n, c.firstRun) {
		c.warnOnce(n, "no-instance", corev1.EventTypeWarning, ReasonNoInstance,
			"node %s has no Instance and joined after node-manager-controller first ran (%s) without node-manager approving its certificate, "+
				"so it reads no bundle and its %s label %q is not trusted; let it join with its group's bootstrap token, "+
				"or create Instance %s labelled %s=<group> to admit it",
			n.Name, c.firstRun.UTC().Format(time.RFC3339), deckhousev1.NodeGroupLabel, group, n.Name, deckhousev1.NodeGroupLabel)
		return nil, nil
	}
	if group == "" {
		return nil, nil
	}
	g, err := c.groups.Get(group)
	if apierrors.IsNotFound(err) {
		return nil, nil // adopted once the group exists (enqueueGroup)
	}
	if err != nil {
		return nil, err
	}
	created, err := c.d.NodeManager.DeckhouseV1alpha1().Instances().Create(ctx, ForNode(n.Name, g), metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		// Made meanwhile (at approval, or by a person): theirs stands.
		return c.d.NodeManager.DeckhouseV1alpha1().Instances().Get(ctx, n.Name, metav1.GetOptions{})
	case err != nil:
		return nil, fmt.Errorf("creating Instance %s for node %s: %w", n.Name, n.Name, err)
	}
	klog.InfoS("Adopted a node that predates node-manager: Instance created from its label", "instance", n.Name, "group", g.Name)
	c.d.Recorder.Eventf(n, nil, corev1.EventTypeNormal, ReasonAdoptedInstance, "AdoptNode",
		"node %s joined before node-manager-controller first ran; its group %s is taken from its label once and pinned in Instance %s",
		n.Name, g.Name, n.Name)
	return created, nil
}

// warnMismatch reports a Node whose label names another group than its
// Instance: the label is ignored (a kubelet may write it), never followed.
func (c *Controller) warnMismatch(n *corev1.Node, inst *deckhousev1alpha1.Instance) {
	label, pinned := nodes.Group(n), inst.Labels[deckhousev1.NodeGroupLabel]
	if label == pinned {
		c.forget(n.Name)
		return
	}
	c.warnOnce(n, "label="+label, corev1.EventTypeWarning, ReasonGroupMismatch,
		"node %s is labelled %s=%q but its Instance pins it to group %q: the label is ignored, the node reads only %q's bundles; "+
			"to move a machine to another group, delete its Node and Instance and join it again with that group's bootstrap token",
		n.Name, deckhousev1.NodeGroupLabel, label, pinned, pinned)
}

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
