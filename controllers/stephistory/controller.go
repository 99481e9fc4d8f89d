// Package stephistory turns the step history bashible reports on each
// node's Instance (status.lastRun and status.lastFailure: every step of
// the run with its attempts, duration and exit status) into metrics, by
// group and step: how long steps take, how often they are retried, how
// often they fail, and how runs end. Deckhouse keeps only the last message
// of a run; nobody keeps durations.
//
// A run is counted once per process: the controller remembers the runs of
// each node it has counted (Seen) and counts a run only if it completed
// after the controller started, so a restart or a new leader does not
// count the runs its predecessor counted (a run that ends while no
// replica leads is not counted).
//
// Labels are bounded: node_group is the Instance's group label (written
// only by node-manager); step is the step's name when the group's served
// bundle has a step of that name, and OtherStep otherwise. A node writes
// its own Instance's status, so the names it reports are not trusted to be
// few; the bundle's are (a bundle of a pinned or older revision with
// other names is counted under OtherStep until its names are served
// again). A group's series are dropped when its bundle is.
package stephistory

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	bashiblelisters "github.com/node-manager/node-manager/generated/listers/bashible/v1alpha1"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "stephistory"

// Controller exports the step history of every node's Instance.
type Controller struct {
	d         *manager.Deps
	instances nmlistersv1alpha1.InstanceLister
	bundles   bashiblelisters.NodeGroupBundleLister
	synced    []cache.InformerSynced
	queue     *loop.Loop
	metrics   *Metrics

	// since is when Run started: runs that completed before are not counted.
	since time.Time
	mu    sync.Mutex
	seen  map[string]Seen // node -> the runs counted
}

// New wires the controller to the shared informers: an Instance queues its
// name; a group's bundle going away drops the group's series. It waits for
// the bundles, which name the steps, so it waits while bashible-apiserver
// is unavailable.
func New(d *manager.Deps) *Controller {
	inst := d.Informers.NodeManager.Deckhouse().V1alpha1().Instances()
	bundles := d.Informers.Bundles.Bashible().V1alpha1().NodeGroupBundles()
	c := &Controller{
		d:         d,
		instances: inst.Lister(),
		bundles:   bundles.Lister(),
		synced:    []cache.InformerSynced{inst.Informer().HasSynced, bundles.Informer().HasSynced},
		metrics:   newMetrics(d.Registry),
		seen:      map[string]Seen{},
	}
	c.queue = loop.New(Name, d.Loops, c.sync)
	_, _ = inst.Informer().AddEventHandler(c.queue.Handler(loop.ByName))
	_, _ = bundles.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if b, ok := obj.(*bashiblev1alpha1.NodeGroupBundle); ok {
			c.metrics.forgetGroup(b.Name)
		}
	}})
	return c
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.since = c.d.Clock.Now()
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.queue.Run(ctx, workers)
}
