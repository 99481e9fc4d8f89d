// Package instances keeps an Instance for every node of a Static,
// CloudStatic or CloudPermanent group: created as soon as the node
// appears (bashible-apiserver narrows a node's reads by its Instance, and
// bashible reports its conditions on it), with nodeRef, phase and a
// bashible summary derived from the conditions bashible writes.
package instances

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// ManagedByLabel marks the Instances this controller created (and so may delete).
const ManagedByLabel = "app.kubernetes.io/managed-by"

// Controller keeps Instances of static and CloudPermanent nodes.
type Controller struct {
	d         *manager.Deps
	groups    nmlisters.NodeGroupLister
	instances nmlistersv1alpha1.InstanceLister
	synced    []cache.InformerSynced
	loop      *loop.Loop
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
	}
	c.loop = loop.New("instances", d.Loops, c.sync)
	_, _ = nodeInformer.AddEventHandler(c.loop.Handler(loop.ByName))
	_, _ = inst.Informer().AddEventHandler(c.loop.Handler(loop.ByName))
	// A group's type decides whether its nodes have Instances.
	_, _ = ng.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueGroup(obj) },
		UpdateFunc: func(old, cur any) {
			if old.(*deckhousev1.NodeGroup).Spec.NodeType != cur.(*deckhousev1.NodeGroup).Spec.NodeType {
				c.enqueueGroup(cur)
			}
		},
	})
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
	c.loop.Run(ctx, workers)
}

// wanted reports whether nodes of the group get an Instance from us
// (CloudEphemeral machines get theirs from their machine controller).
func wanted(g *deckhousev1.NodeGroup) bool {
	switch g.Spec.NodeType {
	case deckhousev1.NodeTypeStatic, deckhousev1.NodeTypeCloudStatic, deckhousev1.NodeTypeCloudPermanent:
		return true
	}
	return false
}

func (c *Controller) sync(ctx context.Context, name string) error {
	n, err := c.d.Nodes.Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	inst, ierr := c.instances.Get(name)
	if ierr != nil && !apierrors.IsNotFound(ierr) {
		return ierr
	}
	var g *deckhousev1.NodeGroup
	if n != nil && nodes.Group(n) != "" {
		if g, err = c.groups.Get(nodes.Group(n)); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if n == nil || g == nil || !wanted(g) {
		// No node (or no longer one of ours): an Instance we made goes.
		if inst != nil && inst.Labels[ManagedByLabel] == manager.Name && inst.DeletionTimestamp == nil {
			err := c.d.NodeManager.DeckhouseV1alpha1().Instances().Delete(ctx, name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &inst.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting Instance %s of a node that is gone: %w", name, err)
			}
			klog.InfoS("Deleted Instance", "instance", name)
		}
		return nil
	}
	if inst == nil {
		// The group label is set once, here: the Instance pins the node to
		// its group, so a node that relabels itself gains nothing.
		inst = &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{nodes.GroupLabel: g.Name, ManagedByLabel: manager.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: deckhousev1.SchemeGroupVersion.String(), Kind: "NodeGroup", Name: g.Name, UID: g.UID,
				BlockOwnerDeletion: ptr.To(false),
			}},
		}}
		created, err := c.d.NodeManager.DeckhouseV1alpha1().Instances().Create(ctx, inst, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			// Someone else (a bootstrap tool, a person) made it meanwhile:
			// keep theirs, and keep its status.
			if created, err = c.d.NodeManager.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("reading Instance %s: %w", name, err)
			}
		case err != nil:
			return fmt.Errorf("creating Instance %s for node %s: %w", name, name, err)
		default:
			klog.InfoS("Created Instance", "instance", name, "group", g.Name)
		}
		inst = created
	}
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
		metav1.ApplyOptions{FieldManager: manager.Name, Force: true}); err != nil {
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
