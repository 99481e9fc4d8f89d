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

	certificatesv1 "k8s.io/api/certificates/v1"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/node-manager/node-manager/controllers/instances"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "csr-approval"

// Controller approves or denies node-manager bootstrappers' kubelet CSRs.
type Controller struct {
	d      *manager.Deps
	csrs   certificateslisters.CertificateSigningRequestLister
	groups nmlisters.NodeGroupLister
	synced []cache.InformerSynced
	queue  *loop.Loop
	// tombstones are the names of nodes deleted recently, and their groups.
	tombstones *instances.Tombstones
}

// New wires the controller to the shared informers: a CSR that is still
// undecided queues its name.
func New(d *manager.Deps) *Controller {
	csrs := d.Informers.Cluster.Certificates().V1().CertificateSigningRequests()
	ng := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	// A CSR's node, its Instance and its tombstone are read from the API
	// when it is decided (Controller.cluster).
	c := &Controller{
		d:          d,
		csrs:       csrs.Lister(),
		groups:     ng.Lister(),
		synced:     []cache.InformerSynced{csrs.Informer().HasSynced, ng.Informer().HasSynced},
		tombstones: &instances.Tombstones{Kube: d.Kube, Namespace: d.Namespace, Clock: d.Clock},
	}
	c.queue = loop.New(Name, d.Loops, c.sync)
	_, _ = csrs.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: pending,
		Handler:    c.queue.Handler(loop.ByName),
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

// Run implements manager.Controller: it waits for its informers, then
// works the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.queue.Run(ctx, workers)
}
