// Package instances keeps the Instance of every node: the record of the
// node's group that only node-manager writes (bashible-apiserver narrows a
// node's reads by it, and bashible reports its conditions on it).
//
// An Instance is created when node-manager approves the kubelet's
// certificate (controllers/csrapproval), labelled with the group of the
// bootstrap token that asked, before the node can read anything. This
// controller never changes that label and never deletes an Instance
// because of a Node's label: it fills the status (nodeRef, phase, a
// bashible summary), warns when a Node's label disagrees with its
// Instance, and deletes an Instance it made only when its Node is really
// gone (confirmed by a fresh read), or when no Node came within PendingTTL
// of the approval.
//
// Nodes that have no Instance are adopted — an Instance from the Node's
// own label, trust on first use — only if their Node object is older than
// node-manager-controller's first run in the cluster (the creation time of
// its leader Lease): they joined before node-manager approved certificates.
// A Node created later without an Instance (a machine that did not join
// through node-manager's approval, or a node that re-registered after its
// Node and Instance were deleted) is never adopted: it reads nothing and
// gets a Warning Event saying how to admit it.
package instances

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodes"
	applyv1alpha1 "github.com/node-manager/node-manager/generated/applyconfiguration/deckhouse/v1alpha1"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// PendingTTL is how long an Instance created at certificate approval waits
// for its Node before it is deleted (a kubelet registers seconds after it
// has its certificate).
const PendingTTL = time.Hour

// Event reasons on Nodes.
const (
	ReasonGroupMismatch   = "NodeGroupLabelIgnored"
	ReasonNoInstance      = "NodeHasNoInstance"
	ReasonAdoptedInstance = "InstanceAdopted"
)

// ForNode returns the Instance that pins node name to group g: the only
// place its group label is ever set.
func ForNode(name string, g *deckhousev1.NodeGroup) *deckhousev1alpha1.Instance {
	return &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{deckhousev1.NodeGroupLabel: g.Name, deckhousev1.ManagedByLabel: deckhousev1.NodeManagerControllerName},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: deckhousev1.SchemeGroupVersion.String(), Kind: "NodeGroup", Name: g.Name, UID: g.UID,
			BlockOwnerDeletion: ptr.To(false),
		}},
	}}
}

// Adoptable reports whether a Node without an Instance may get one from
// its own label: only a Node that existed before node-manager-controller
// first ran (firstRun), so before node-manager approved certificates.
func Adoptable(n *corev1.Node, firstRun time.Time) bool {
	return !firstRun.IsZero() && n.CreationTimestamp.Time.Before(firstRun)
}

// Controller keeps Instances.
type Controller struct {
	d         *manager.Deps
	groups    nmlisters.NodeGroupLister
	instances nmlistersv1alpha1.InstanceLister
	synced    []cache.InformerSynced
	loop      *loop.Loop

	// firstRun is the creation time of the leader Lease, read once.
	firstRun time.Time
	// warned is the Node label each node was last warned about, so a
	// node is warned once per change, not on every heartbeat.
	mu     sync.Mutex
	warned map[string]string
}

// New wires the controller to the shared informers.
func New(d *manager.Deps) *Controller {
	ng := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	inst := d.Informers.NodeManager.Deckhouse().V1alpha1().Instances()
	nodeInformer := d.Informers.Cluster.Core().V1().Nodes().Informer()
	c := &Controller{
		d:         d,
		groups:    ng.Lister(),
		instances: inst.Lister(),
		synced:    []cache.InformerSynced{ng.Informer().HasSynced, inst.Informer().HasSynced, nodeInformer.HasSynced},
		warned:    map[string]string{},
	}
	c.loop = loop.New("instances", d.Loops, c.sync)
	_, _ = nodeInformer.AddEventHandler(c.loop.Handler(loop.ByName))
	_, _ = inst.Informer().AddEventHandler(c.loop.Handler(loop.ByName))
	// A node waiting for adoption waits for its group to exist.
	_, _ = ng.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: c.enqueueGroup})
	return c
}

func (c *Controller) enqueueGroup(obj any) {
	g, ok := obj.(*deckhousev1.NodeGroup)
	if !ok {
		return
	}
	ns, err := c.d.Nodes.InGroup(g.Name)
	if err != nil {
		return
	}
	for _, n := range ns {
		c.loop.Add(n.Name)
	}
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return "instances" }

// Run implements manager.Controller.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, c.Name(), c.synced...) {
		return
	}
	// The leader holds the Lease, so it exists; its creation time is when
	// node-manager-controller first ran in this cluster.
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err := c.d.Kube.CoordinationV1().Leases(c.d.Namespace).Get(ctx, deckhousev1.NodeManagerControllerName, metav1.GetOptions{})
		if err != nil {
			klog.ErrorS(err, "Reading the leader Lease to learn which nodes predate node-manager; retrying",
				"lease", klog.KRef(c.d.Namespace, deckhousev1.NodeManagerControllerName))
			return false, nil
		}
		c.firstRun = lease.CreationTimestamp.Time
		return true, nil
	})
	if err != nil {
		return
	}
	klog.InfoS("Nodes created before node-manager-controller first ran are adopted from their label", "firstRun", c.firstRun)
	c.loop.Run(ctx, workers)
}

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
			c.loop.AddAfter(inst.Name, wait)
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

// Summary derives the Instance's phase and bashible summary from the node
// and the conditions bashible reported.
func Summary(n *corev1.Node, inst *deckhousev1alpha1.Instance) (deckhousev1alpha1.InstancePhase, deckhousev1alpha1.BashibleStatus, string) {
	phase := deckhousev1alpha1.InstanceRunning
	if n.DeletionTimestamp != nil {
		phase = deckhousev1alpha1.InstanceTerminating
	}
	cs := inst.Status.Conditions
	for _, w := range []struct {
		typ     string
		summary deckhousev1alpha1.BashibleStatus
	}{{"WaitingDisruptionApproval", "WaitingDisruptionApproval"}, {"WaitingApproval", "WaitingApproval"}} {
		if c := meta.FindStatusCondition(cs, w.typ); c != nil && c.Status == metav1.ConditionTrue {
			return phase, w.summary, c.Message
		}
	}
	if c := meta.FindStatusCondition(cs, "BashibleReady"); c != nil {
		switch c.Status {
		case metav1.ConditionTrue:
			return phase, "Ready", c.Message
		case metav1.ConditionFalse:
			return phase, "Error", c.Message
		}
		return phase, "Unknown", c.Message
	}
	return phase, "Unknown", "bashible has not reported yet"
}
