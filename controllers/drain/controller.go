// Package drain cordons and drains nodes that carry
// update.node.deckhouse.io/draining: pods are evicted through the Eviction
// API, so PodDisruptionBudgets hold. A drain that did not finish is never
// recorded as drained.
package drain

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodes"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "drain"

// Controller runs one drain per node that carries the draining annotation,
// and cancels it when the annotation goes.
type Controller struct {
	d       *manager.Deps
	opts    Options
	groups  nmlisters.NodeGroupLister
	synced  []cache.InformerSynced
	queue   *loop.Loop
	metrics *Metrics

	mu      sync.Mutex
	running map[string]*run
	// ctx is Run's while it works the queue, nil before and after: no
	// drain starts outside Run.
	ctx context.Context
	// drains are the running drains' goroutines, which Run waits for.
	drains sync.WaitGroup
}

// New wires the controller to the shared informers: a node queues its
// name when it comes or goes, or when its drain annotations or its
// cordon change.
func New(d *manager.Deps, opts Options) *Controller {
	ng := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	nodeInformer := d.Informers.Cluster.Core().V1().Nodes().Informer()
	c := &Controller{
		d:      d,
		opts:   opts,
		groups: ng.Lister(),
		synced: []cache.InformerSynced{nodeInformer.HasSynced, ng.Informer().HasSynced,
			d.Informers.NodeManager.Deckhouse().V1alpha1().Instances().Informer().HasSynced}, // a node's group
		metrics: newMetrics(d.Registry),
		running: map[string]*run{},
	}
	c.queue = loop.New(Name, d.Loops, c.sync)
	enqueue := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if n, ok := obj.(*corev1.Node); ok {
			c.queue.Add(n.Name)
		}
	}
	_, _ = nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, DeleteFunc: enqueue,
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Node), cur.(*corev1.Node)
			for _, k := range []string{deckhousev1.DrainingAnnotation, deckhousev1.DrainedAnnotation, deckhousev1.DrainFailedAnnotation} {
				if o.Annotations[k] != n.Annotations[k] || nodes.Has(o, k) != nodes.Has(n, k) {
					enqueue(cur)
					return
				}
			}
			if o.Spec.Unschedulable != n.Spec.Unschedulable {
				enqueue(cur)
			}
		},
	})
	return c
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it waits for its informers, works the
// queue until ctx ends, and then cancels every running drain and waits for
// it.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	c.queue.Run(ctx, workers)
	c.mu.Lock()
	c.ctx = nil
	for _, r := range c.running {
		r.cancel()
	}
	c.mu.Unlock()
	// A lost term ends here: the drains must have stopped writing before
	// the next term (of this process or another) resumes them.
	c.drains.Wait()
}
