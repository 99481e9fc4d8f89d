// Package instances keeps the Instance of every node: the record of the
// node's group that only node-manager writes (bashible-apiserver narrows a
// node's reads by it, never by the Node's own label, and bashible reports
// its conditions on it).
//
// A node's group is decided by node-manager, once, in one of three ways:
//
//   - At certificate approval (controllers/csrapproval): the Instance is
//     created, labelled with the group of the bootstrap token that asked,
//     before the node can read anything. This is how every node type joins
//     (a cloud machine's cloud-init runs the same bootstrap with its
//     group's token).
//   - From the join, when a Node registers without an Instance but an
//     approved kubelet client CSR of a node-manager bootstrap token for its
//     name, created at most JoinWindow before the Node, still exists: the
//     token's group, which kube-apiserver's authenticator recorded in the
//     CSR. This covers a CSR that kube-controller-manager approved before
//     node-manager could (its auto-approval bound to all bootstrappers, as
//     in clusters migrated from Deckhouse), and an Instance that was lost
//     between the approval and the registration.
//   - By adoption, for a Node created before node-manager-controller first
//     ran in the cluster (the creation time of its leader Lease): its own
//     node.deckhouse.io/group label, trusted once (it joined before
//     node-manager approved certificates).
//
// Every other node gets no Instance, because its group cannot be decided
// safely: a Node created later whose certificate no node-manager token
// obtained (another tool's token, a certificate made by hand, a node that
// registered again long after its join), a node that predates node-manager
// without a group label, or a node two groups' tokens obtained certificates
// for. It reads nothing, gets an Event saying how to admit it (join it
// with its group's token, or create its Instance by hand), and is counted
// in node_manager_node_without_instance, which the NodeHasNoInstance alert
// watches. Decide is that rule, a pure function.
//
// This controller never changes an Instance's group label and never
// deletes an Instance because of a Node's label: it fills the status
// (nodeRef, phase, a bashible summary), warns when a Node's label
// disagrees with its Instance, and deletes an Instance it made only when
// its Node is really gone (confirmed by a fresh read), or when no Node came
// within PendingTTL of the approval; the name then stays the group's for
// TombstoneTTL (Tombstones), so that no other group's token takes it over.
package instances

import (
	"context"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "instances"

// PendingTTL is how long an Instance created at certificate approval waits
// for its Node before it is deleted (a kubelet registers seconds after it
// has its certificate).
const PendingTTL = time.Hour

// ReasonGroupMismatch is the reason of the Event on a Node whose label
// names another group than its Instance (the others are in decide.go).
const ReasonGroupMismatch = "NodeGroupLabelIgnored"

// Controller keeps Instances.
type Controller struct {
	d         *manager.Deps
	groups    nmlisters.NodeGroupLister
	instances nmlistersv1alpha1.InstanceLister
	csrs      certificateslisters.CertificateSigningRequestLister
	synced    []cache.InformerSynced
	queue     *loop.Loop
	metrics   *Metrics
	// tombstones remember the group of each Instance deleted with its Node.
	tombstones *Tombstones

	// firstRun is the creation time of the leader Lease, read once.
	firstRun time.Time
	// warned is the Node label each node was last warned about, so a
	// node is warned once per change, not on every heartbeat.
	mu     sync.Mutex
	warned map[string]string
}

// New wires the controller to the shared informers: a Node or an Instance
// queues its name, an approved join CSR queues its node, and a new group
// queues its nodes.
func New(d *manager.Deps) *Controller {
	ng := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	inst := d.Informers.NodeManager.Deckhouse().V1alpha1().Instances()
	csrs := d.Informers.Cluster.Certificates().V1().CertificateSigningRequests()
	nodeInformer := d.Informers.Cluster.Core().V1().Nodes().Informer()
	c := &Controller{
		d:          d,
		groups:     ng.Lister(),
		instances:  inst.Lister(),
		csrs:       csrs.Lister(),
		synced:     []cache.InformerSynced{ng.Informer().HasSynced, inst.Informer().HasSynced, csrs.Informer().HasSynced, nodeInformer.HasSynced},
		metrics:    newMetrics(d.Registry),
		warned:     map[string]string{},
		tombstones: &Tombstones{Kube: d.Kube, Namespace: d.Namespace, Clock: d.Clock},
	}
	c.queue = loop.New(Name, d.Loops, c.sync)
	_, _ = nodeInformer.AddEventHandler(c.queue.Handler(loop.ByName))
	_, _ = inst.Informer().AddEventHandler(c.queue.Handler(loop.ByName))
	// The Node may be seen before its CSR's approval is.
	_, _ = csrs.Informer().AddEventHandler(c.queue.Handler(joinedNode))
	// A node waiting for adoption waits for its group to exist.
	_, _ = ng.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: c.enqueueGroup})
	return c
}

// joinedNode keys a join CSR by its node ("" for any other CSR).
func joinedNode(obj any) string {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return ""
	}
	j, _ := JoinOf(csr)
	return j.Node
}

// enqueueGroup queues the nodes of a group that has just appeared, and
// every node that has no Instance.
func (c *Controller) enqueueGroup(obj any) {
	g, ok := obj.(*deckhousev1.NodeGroup)
	if !ok {
		return
	}
	// Nodes waiting for a group their join decided may carry another label.
	for _, name := range c.metrics.nodes() {
		c.queue.Add(name)
	}
	ns, err := c.d.Nodes.Labelled(g.Name)
	if err != nil {
		return
	}
	for _, n := range ns {
		c.queue.Add(n.Name)
	}
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it waits for its informers and for
// the leader Lease's creation time (which nodes predate node-manager), then
// works the queue until ctx ends. Without leader election it waits until
// some process has created the Lease.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	// The leader holds the Lease, so it exists; its creation time is when
	// node-manager-controller first ran in this cluster.
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err := c.d.Kube.CoordinationV1().Leases(c.d.Namespace).Get(ctx, deckhousev1.NodeManagerControllerName, metav1.GetOptions{})
		if err != nil {
			klog.FromContext(ctx).Error(err, "Reading the leader Lease to learn which nodes predate node-manager; retrying",
				"lease", klog.KRef(c.d.Namespace, deckhousev1.NodeManagerControllerName))
			return false, nil
		}
		c.firstRun = lease.CreationTimestamp.Time
		return true, nil
	})
	if err != nil {
		return
	}
	klog.FromContext(ctx).Info("Nodes created before node-manager-controller first ran are adopted from their label; later ones only from their join", "firstRun", c.firstRun)
	c.queue.Run(ctx, workers)
}
