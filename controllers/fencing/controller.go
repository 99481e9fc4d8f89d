// Package fencing frees the pods of dead fenced nodes: Deckhouse's fencing
// controller, with the blast-radius cap and the guards Deckhouse lacks.
//
// A fencing agent (agents/fencing-agent) on every node of a group with
// spec.fencing arms the node's watchdog and labels its Node
// node-manager.deckhouse.io/fencing-enabled while it is armed. This
// controller watches those Nodes and their kube-node-lease Leases. A node
// whose Lease has not been renewed for its group's evacuation delay (the
// watchdog timeout plus --fencing-margin, long enough that its watchdog has
// surely reset it: the inequality in
// apiserver/apis/deckhouse/v1/fencing_timing.go) is dead: its pods are
// force-deleted (grace period 0), so their controllers start them
// elsewhere, and its Node is deleted, except for Static and CloudStatic
// nodes and nodes in Notify mode, which keep their Node (annotated
// node-manager.deckhouse.io/fenced) to rejoin. A node in maintenance
// (update approved, disruption approved, or fencing-disable) is never fenced.
//
// What is decided is a pure function, Decide (decide.go), over the whole
// cluster at once, because the guards are cluster-wide: at most
// --fencing-max-nodes-per-interval nodes (or --fencing-max-percent-per-interval
// of a group) are fenced per group per --fencing-interval; when more than
// --fencing-outage-percent of all fenced nodes are dead at once, or the
// controller has seen no node renew its Lease for --fencing-api-view-timeout
// (its own view is stale), nobody is fenced; when a majority of a group of
// three or more has stopped renewing at once (it may be alive and cut off,
// its agents feeding their watchdogs on their quorum), none of that group
// is fenced. Every fenced group carries the
// condition FencingHeld, applied with its own field manager
// (FencingControllerFieldManager) beside the nodegroup-status controller's
// conditions; every decision about a dead node is an Event on the Node and
// on its NodeGroup, and the metrics node_manager_fencing_* count them.
package fencing

import (
	"context"
	"maps"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "fencing"

// key is the loop's only key: the guards look at the whole cluster.
const key = "all"

// leaseBatch gathers Lease renewals, which come every few seconds per
// node, into one decision.
const leaseBatch = time.Second

// recheck bounds how long the controller goes without deciding again, so
// that the view's freshness is checked even when no event comes.
const recheck = 10 * time.Second

// Controller fences dead nodes.
type Controller struct {
	d       *manager.Deps
	opts    Options
	groups  nmlisters.NodeGroupLister
	leases  coordinationlisters.LeaseLister
	synced  []cache.InformerSynced
	queue   *loop.Loop
	metrics *Metrics

	mu sync.Mutex
	// seen is when the controller saw each node's Lease renewed (by its
	// clock), and lastSeen the latest of those: the freshness of its view.
	seen     map[string]renewal
	lastSeen time.Time
	// recent are the nodes fenced within the cap's interval, by group.
	recent map[string]map[string]time.Time
	// fenced is the Lease renewal each kept node was fenced at (the
	// FencedAnnotation, before the informer shows it).
	fenced map[string]string
	// reported is the last decision reported for each node (group, reason),
	// so a skipped node gets one Event per reason, not one per decision.
	reported map[string]string
	// held is the FencingHeld state last applied to each group.
	held map[string]Held
	// heldAt is when each node was last held by a guard under which its
	// agent may keep feeding (Node.HeldUntil).
	heldAt map[string]time.Time
}

// renewal is one observed Lease renewal.
type renewal struct {
	renewTime string
	at        time.Time
}

// New wires the controller to the shared informers: a fenced Node's labels
// or annotations changing, a NodeGroup changing, or a Lease being renewed
// queues the one key.
func New(d *manager.Deps, opts Options) *Controller {
	ng := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	leases := d.Informers.NodeLeases.Coordination().V1().Leases()
	nodeInformer := d.Informers.Cluster.Core().V1().Nodes().Informer()
	c := &Controller{
		d:      d,
		opts:   opts,
		groups: ng.Lister(),
		leases: leases.Lister(),
		synced: []cache.InformerSynced{ng.Informer().HasSynced, leases.Informer().HasSynced, nodeInformer.HasSynced,
			d.Informers.NodeManager.Deckhouse().V1alpha1().Instances().Informer().HasSynced}, // the nodes' groups
		metrics:  newMetrics(d.Registry),
		seen:     map[string]renewal{},
		recent:   map[string]map[string]time.Time{},
		fenced:   map[string]string{},
		reported: map[string]string{},
		held:     map[string]Held{},
		heldAt:   map[string]time.Time{},
	}
	c.queue = loop.New(Name, d.Loops, c.sync)
	all := func(any) { c.queue.Add(key) }
	_, _ = ng.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: all, DeleteFunc: all, UpdateFunc: func(_, cur any) { all(cur) }})
	_, _ = nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if fenceable(obj) {
				all(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if fenceable(obj) {
				all(obj)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Node), cur.(*corev1.Node)
			if (fenceable(o) || fenceable(n)) && (!maps.Equal(o.Labels, n.Labels) || !maps.Equal(o.Annotations, n.Annotations)) {
				all(cur)
			}
		},
	})
	_, _ = leases.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.observe(obj) },
		UpdateFunc: func(_, cur any) { c.observe(cur) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				c.mu.Lock()
				delete(c.seen, l.Name)
				c.mu.Unlock()
				c.queue.AddAfter(key, leaseBatch)
			}
		},
	})
	return c
}

// observe records when a Lease's renewal was seen: a renewTime that
// changed (or a Lease seen for the first time, as at start) counts as a
// renewal now, by this controller's clock, whatever the node's clock says.
func (c *Controller) observe(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Spec.RenewTime == nil {
		return
	}
	rt := l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	now := c.d.Clock.Now()
	c.mu.Lock()
	if c.seen[l.Name].renewTime != rt {
		c.seen[l.Name] = renewal{renewTime: rt, at: now}
		if now.After(c.lastSeen) {
			c.lastSeen = now
		}
	}
	c.mu.Unlock()
	c.queue.AddAfter(key, leaseBatch)
}

// fenceable reports whether obj is a Node that carries the fencing label
// or the fenced annotation.
func fenceable(obj any) bool {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return false
	}
	_, labelled := n.Labels[deckhousev1.FencingEnabledLabel]
	_, annotated := n.Annotations[deckhousev1.FencedAnnotation]
	return labelled || annotated
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it waits for its informers, then
// decides with one worker (there is one key) until ctx ends.
func (c *Controller) Run(ctx context.Context, _ int) {
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.queue.Add(key)
	c.queue.Run(ctx, 1)
}
