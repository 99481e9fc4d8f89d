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
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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

// Event reasons on Nodes.
const (
	ReasonGroupMismatch   = "NodeGroupLabelIgnored"
	ReasonNoInstance      = "NodeHasNoInstance"
	ReasonAdoptedInstance = "InstanceAdopted"
)

// Controller keeps Instances.
type Controller struct {
	d         *manager.Deps
	groups    nmlisters.NodeGroupLister
	instances nmlistersv1alpha1.InstanceLister
	synced    []cache.InformerSynced
	queue     *loop.Loop

	// firstRun is the creation time of the leader Lease, read once.
	firstRun time.Time
	// warned is the Node label each node was last warned about, so a
	// node is warned once per change, not on every heartbeat.
	mu     sync.Mutex
	warned map[string]string
}

// New wires the controller to the shared informers: a Node or an Instance
// queues its name, and a new group queues its nodes.
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
	c.queue = loop.New(Name, d.Loops, c.sync)
	_, _ = nodeInformer.AddEventHandler(c.queue.Handler(loop.ByName))
	_, _ = inst.Informer().AddEventHandler(c.queue.Handler(loop.ByName))
	// A node waiting for adoption waits for its group to exist.
	_, _ = ng.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: c.enqueueGroup})
	return c
}

// enqueueGroup queues the nodes of a group that has just appeared.
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
	c.queue.Run(ctx, workers)
}
