// Package csrapproval approves the kubelet client certificates that
// node-manager's bootstrap tokens ask for, and decides each node's group
// as it does: a token of group G (authenticated by kube-apiserver as
// system:bootstrappers:d8-node-manager:G) obtains a certificate only for a
// node that is not another group's, and node-manager creates the node's
// Instance labelled G before it approves. The Instance is the record of
// the node's group that only node-manager writes; bashible-apiserver
// narrows the node's reads by it from its first request with the new
// certificate.
//
// kube-controller-manager's own approver must not approve these CSRs: the
// ClusterRole system:certificates.k8s.io:certificatesigningrequests:nodeclient
// must not be bound to system:bootstrappers:d8-node-manager (nor to
// system:bootstrappers), or a token could obtain any node's certificate.
// Certificate renewals by nodes (selfnodeclient) stay with kube-controller-manager.
package csrapproval

import (
	"context"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/instances"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodes"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// Name is the controller's name.
const Name = "csr-approval"

// Controller approves or denies node-manager bootstrappers' kubelet CSRs.
type Controller struct {
	d         *manager.Deps
	csrs      certificateslisters.CertificateSigningRequestLister
	groups    nmlisters.NodeGroupLister
	instances nmlistersv1alpha1.InstanceLister
	synced    []cache.InformerSynced
	loop      *loop.Loop
}

// New wires the controller to the shared informers.
func New(d *manager.Deps) *Controller {
	csrs := d.Informers.Cluster.Certificates().V1().CertificateSigningRequests()
	ng := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	inst := d.Informers.NodeManager.Deckhouse().V1alpha1().Instances()
	c := &Controller{
		d:         d,
		csrs:      csrs.Lister(),
		groups:    ng.Lister(),
		instances: inst.Lister(),
		synced: []cache.InformerSynced{csrs.Informer().HasSynced, ng.Informer().HasSynced, inst.Informer().HasSynced,
			d.Informers.Cluster.Core().V1().Nodes().Informer().HasSynced},
	}
	c.loop = loop.New(Name, d.Loops, c.sync)
	_, _ = csrs.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: pending,
		Handler:    c.loop.Handler(loop.ByName),
	})
	return c
}

// pending reports whether a CSR is still undecided (the others never
// need a look).
func pending(obj any) bool {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	return ok && !decided(csr)
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, c.Name(), c.synced...) {
		return
	}
	c.loop.Run(ctx, workers)
}

// cluster answers the decision's questions from the informers.
func (c *Controller) cluster() Cluster {
	return Cluster{
		GroupExists: func(g string) bool { _, err := c.groups.Get(g); return err == nil },
		InstanceGroup: func(n string) (string, bool) {
			inst, err := c.instances.Get(n)
			if err != nil {
				return "", false
			}
			return inst.Labels[deckhousev1.NodeGroupLabel], true
		},
		NodeGroup: func(n string) (string, bool) {
			node, err := c.d.Nodes.Get(n)
			if err != nil {
				return "", false
			}
			return nodes.Group(node), true
		},
	}
}

func (c *Controller) sync(ctx context.Context, name string) error {
	csr, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	d := Decide(csr, c.cluster())
	if d.Verdict == Approve && d.CreateInstance {
		if d, err = c.createInstance(ctx, d); err != nil {
			return err
		}
	}
	switch d.Verdict {
	case Approve:
		return c.conclude(ctx, csr, d, certificatesv1.CertificateApproved)
	case Deny:
		return c.conclude(ctx, csr, d, certificatesv1.CertificateDenied)
	}
	return nil
}

// createInstance pins the node to the decision's group before the
// approval. Create is the arbiter between two tokens racing for one name:
// if the Instance exists by now, its group decides.
func (c *Controller) createInstance(ctx context.Context, d Decision) (Decision, error) {
	g, err := c.groups.Get(d.Group)
	if err != nil {
		return d, fmt.Errorf("reading node group %s for the Instance of node %s: %w", d.Group, d.Node, err)
	}
	client := c.d.NodeManager.DeckhouseV1alpha1().Instances()
	_, err = client.Create(ctx, instances.ForNode(d.Node, g), metav1.CreateOptions{FieldManager: deckhousev1.NodeManagerControllerName})
	if err == nil {
		klog.InfoS("Created the Instance of a joining node", "instance", d.Node, "group", d.Group)
		return d, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return d, fmt.Errorf("creating Instance %s of group %s before approving its kubelet certificate: %w", d.Node, d.Group, err)
	}
	inst, err := client.Get(ctx, d.Node, metav1.GetOptions{})
	if err != nil {
		return d, fmt.Errorf("reading Instance %s: %w", d.Node, err)
	}
	if pinned := inst.Labels[deckhousev1.NodeGroupLabel]; pinned != d.Group {
		return deny(ReasonNodeOfOtherGroup, d.Node, d.Group,
			"node %s belongs to node group %q (its Instance), so a bootstrap token of node group %s may not obtain its certificate", d.Node, pinned, d.Group), nil
	}
	return d, nil
}

func (c *Controller) conclude(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, d Decision, typ certificatesv1.RequestConditionType) error {
	csr = csr.DeepCopy()
	now := metav1.NewTime(c.d.Clock.Now())
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: d.Reason, Message: d.Message, LastUpdateTime: now, LastTransitionTime: now,
	})
	if _, err := c.d.Kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{FieldManager: deckhousev1.NodeManagerControllerName}); err != nil {
		return fmt.Errorf("recording %s on CSR %s: %w", typ, csr.Name, err)
	}
	klog.InfoS("Decided a kubelet client CSR", "csr", csr.Name, "decision", string(typ), "reason", d.Reason,
		"node", d.Node, "group", d.Group, "requestor", csr.Spec.Username, "message", d.Message)
	return nil
}
